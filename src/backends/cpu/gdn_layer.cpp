#include "backends/cpu/gdn_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/ops.h"

namespace tern::cpu {

namespace {

// A sequence's calls of at least this many tokens take the chunked delta rule.
constexpr int64_t kChunkedFrom = 64;
constexpr int64_t kConvChannels = 256;  // channels a work item

}  // namespace

std::vector<float> transpose_conv(const ModelConfig& c, const GdnWeights& w) {
  const int64_t C = c.conv_channels(), K = c.conv_kernel;
  std::vector<float> t(size_t(C * K));
  for (int64_t ch = 0; ch < C; ++ch)
    for (int64_t j = 0; j < K; ++j) t[size_t(j * C + ch)] = w.conv[size_t(ch * K + j)];
  return t;
}

void GdnLayer::conv(const Context& ctx, const std::vector<float>& conv_t, int64_t C, int64_t K,
                    int64_t c0, int64_t n, float* mixed, int64_t T, model::GdnState& st) {
  // In place, newest token first (each output reads inputs at or before its
  // own position, which are still unwritten), then the state.
  const int64_t H = K - 1;
  float last[8][kConvChannels];  // the pre-conv rows that become the state
  for (int64_t j = 0; j < H; ++j) {
    const int64_t t = T - H + j;  // position of state row j after this call
    const float* src = t >= 0 ? mixed + t * C + c0 : &st.conv[size_t((H + t) * C + c0)];
    std::copy(src, src + n, last[j]);
  }
  for (int64_t t = T - 1; t >= 0; --t) {
    float acc[kConvChannels] = {};
    for (int64_t j = 0; j < K; ++j) {
      const int64_t u = t - H + j;  // input position of tap j
      const float* src = u >= 0 ? mixed + u * C + c0 : &st.conv[size_t((H + u) * C + c0)];
      const float* wj = &conv_t[size_t(j * C + c0)];
      for (int64_t i = 0; i < n; ++i) acc[i] += wj[i] * src[i];
    }
    ctx.k.silu_mul(acc, nullptr, mixed + t * C + c0, n);
  }
  for (int64_t j = 0; j < H; ++j) std::copy(last[j], last[j] + n, &st.conv[size_t(j * C + c0)]);
}

void GdnLayer::forward(Context& ctx, const ModelConfig& c, const GdnWeights& w,
                       const std::vector<float>& conv_t, const Activations& x, int64_t T,
                       std::span<const SeqRows> seqs, float* out) {
  const int64_t C = c.conv_channels(), Hv = c.lin_v_heads, K = c.conv_kernel;
  const int dk = c.lin_k_dim, dv = c.lin_v_dim;
  const int64_t key_dim = c.lin_key_dim(), value_dim = c.lin_value_dim();
  float* mixed = grow(mixed_, size_t(T * C));
  float* z = grow(z_, size_t(T * value_dim));
  float* bb = grow(b_, size_t(T * Hv));
  float* aa = grow(a_, size_t(T * Hv));
  const MatmulJob proj[] = {{&w.in_qkv, &x, nullptr, T, {mixed, C}},
                            {&w.in_z, &x, nullptr, T, {z, value_dim}},
                            {&w.in_b, &x, nullptr, T, {bb, Hv}},
                            {&w.in_a, &x, nullptr, T, {aa, Hv}}};
  ctx.mm.run(ctx.pool, ctx.k, proj);

  const int64_t conv_items = (C + kConvChannels - 1) / kConvChannels;
  ctx.pool.run(seqs.size() * size_t(conv_items), [&](size_t item, int) {
    const SeqRows& s = seqs[item / size_t(conv_items)];
    const int64_t c0 = int64_t(item % size_t(conv_items)) * kConvChannels;
    conv(ctx, conv_t, C, K, c0, std::min(kConvChannels, C - c0), mixed + s.t0 * C, s.n, *s.gdn);
  });

  const int64_t ratio = Hv / c.lin_k_heads;
  int64_t longest = 0;
  for (const SeqRows& s : seqs) longest = std::max(longest, s.n);
  scratch_.reserve(ctx.pool.size(), size_t(longest) * (2 * size_t(dk) + 2 * size_t(dv) + 2));
  float* y = grow(y_, size_t(T * value_dim));
  ctx.pool.run(seqs.size() * size_t(Hv), [&](size_t item, int thread) {
    const SeqRows& s = seqs[item / size_t(Hv)];
    const int64_t n = int64_t(item % size_t(Hv)), T1 = s.n;
    float* q = scratch_.at(thread);
    float *k = q + T1 * dk, *v = k + T1 * dk, *o = v + T1 * dv, *g = o + T1 * dv, *beta = g + T1;
    const int64_t m = n / ratio;  // value head n reads key head n / ratio
    for (int64_t t = 0; t < T1; ++t) {
      const int64_t r = s.t0 + t;
      const float* row = mixed + r * C;
      std::memcpy(q + t * dk, row + m * dk, size_t(dk) * sizeof(float));
      std::memcpy(k + t * dk, row + key_dim + m * dk, size_t(dk) * sizeof(float));
      std::memcpy(v + t * dv, row + 2 * key_dim + n * dv, size_t(dv) * sizeof(float));
      model::l2_normalize(q + t * dk, dk, 1.0f / std::sqrt(float(dk)));
      model::l2_normalize(k + t * dk, dk, 1.0f);
      beta[t] = model::sigmoid(bb[r * Hv + n]);
      g[t] = -std::exp(w.a_log[size_t(n)]) * model::softplus(aa[r * Hv + n] + w.dt_bias[size_t(n)]);
    }
    const DeltaArgs args{q, k, v, g, beta, T1, dk, dv, &s.gdn->S[size_t(n * dk * dv)], o};
    (T1 >= kChunkedFrom ? ctx.k.delta_chunked : ctx.k.delta_recurrent)(args);
    for (int64_t t = 0; t < T1; ++t) {  // gated RMSNorm per head: norm(o) * w * silu(z)
      float* yt = y + (s.t0 + t) * value_dim + n * dv;
      const float* zt = z + (s.t0 + t) * value_dim + n * dv;
      model::rms_norm(o + t * dv, w.norm.data(), dv, c.rms_eps, yt);
      ctx.k.silu_mul(zt, yt, yt, dv);
    }
  });
  ya_.set(ctx.pool, ctx.k, y, value_dim, T, value_dim, ctx.int8);
  const MatmulJob o_proj[] = {{&w.out, &ya_, nullptr, T, {out, c.hidden}}};
  ctx.mm.run(ctx.pool, ctx.k, o_proj);
}

}  // namespace tern::cpu
