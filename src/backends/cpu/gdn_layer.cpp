#include "backends/cpu/gdn_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/ops.h"

namespace tern::cpu {

namespace {

// Calls with at least this many tokens take the chunked delta rule.
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

void GdnLayer::forward(Context& ctx, const ModelConfig& c, const GdnWeights& w,
                       const std::vector<float>& conv_t, const Activations& x, int64_t T,
                       model::GdnState& st, float* out) {
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

  // Causal conv + SiLU in place, newest token first (each output reads inputs
  // at or before its own position, which are still unwritten), then the state.
  const int64_t H = K - 1;
  ctx.pool.run(size_t((C + kConvChannels - 1) / kConvChannels), [&](size_t item, int) {
    const int64_t c0 = int64_t(item) * kConvChannels, n = std::min(kConvChannels, C - c0);
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
  });

  const bool chunked = T >= kChunkedFrom;
  const int64_t ratio = Hv / c.lin_k_heads;
  const size_t per_head = size_t(T) * (2 * size_t(dk) + 2 * size_t(dv) + 2);
  scratch_.reserve(ctx.pool.size(), per_head);
  float* y = grow(y_, size_t(T * value_dim));
  ctx.pool.run(size_t(Hv), [&](size_t n, int thread) {
    float* q = scratch_.at(thread);
    float *k = q + T * dk, *v = k + T * dk, *o = v + T * dv, *g = o + T * dv, *beta = g + T;
    const int64_t m = int64_t(n) / ratio;  // value head n reads key head n / ratio
    for (int64_t t = 0; t < T; ++t) {
      const float* row = mixed + t * C;
      std::memcpy(q + t * dk, row + m * dk, size_t(dk) * sizeof(float));
      std::memcpy(k + t * dk, row + key_dim + m * dk, size_t(dk) * sizeof(float));
      std::memcpy(v + t * dv, row + 2 * key_dim + int64_t(n) * dv, size_t(dv) * sizeof(float));
      model::l2_normalize(q + t * dk, dk, 1.0f / std::sqrt(float(dk)));
      model::l2_normalize(k + t * dk, dk, 1.0f);
      beta[t] = model::sigmoid(bb[size_t(t * Hv) + n]);
      g[t] = -std::exp(w.a_log[n]) * model::softplus(aa[size_t(t * Hv) + n] + w.dt_bias[n]);
    }
    const DeltaArgs args{q, k, v, g, beta, T, dk, dv, &st.S[n * size_t(dk * dv)], o};
    (chunked ? ctx.k.delta_chunked : ctx.k.delta_recurrent)(args);
    for (int64_t t = 0; t < T; ++t) {  // gated RMSNorm per head: norm(o) * w * silu(z)
      float* yt = y + t * value_dim + int64_t(n) * dv;
      const float* zt = z + t * value_dim + int64_t(n) * dv;
      model::rms_norm(o + t * dv, w.norm.data(), dv, c.rms_eps, yt);
      ctx.k.silu_mul(zt, yt, yt, dv);
    }
  });
  ya_.set(ctx.pool, ctx.k, y, value_dim, T, value_dim, ctx.int8);
  const MatmulJob o_proj[] = {{&w.out, &ya_, nullptr, T, {out, c.hidden}}};
  ctx.mm.run(ctx.pool, ctx.k, o_proj);
}

}  // namespace tern::cpu
