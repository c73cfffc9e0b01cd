#include "model/gdn.h"

#include <cmath>
#include <cstring>

#include "core/thread_pool.h"
#include "model/ops.h"

namespace tern::model {

// The chunked form pays off once a call has a few chunks' worth of tokens.
constexpr int64_t kChunkedFrom = 32;

size_t gdn_conv_floats(const ModelConfig& c) {
  return size_t(c.conv_kernel - 1) * size_t(c.conv_channels());
}

size_t gdn_state_floats(const ModelConfig& c) {
  return size_t(c.lin_v_heads) * size_t(c.lin_k_dim) * size_t(c.lin_v_dim);
}

GdnState make_gdn_state(const ModelConfig& c) {
  GdnState s;
  s.conv.assign(gdn_conv_floats(c), 0.0f);
  s.S.assign(gdn_state_floats(c), 0.0f);
  return s;
}

void delta_rule_recurrent(const float* q, const float* k, const float* v, const float* g,
                          const float* beta, int64_t T, int dk, int dv, float* S, float* o) {
  std::vector<float> r(static_cast<size_t>(dv)), u(static_cast<size_t>(dv));
  for (int64_t t = 0; t < T; ++t) {
    const float* kt = k + t * dk;
    const float* qt = q + t * dk;
    const float alpha = std::exp(g[t]);
    for (int i = 0; i < dk * dv; ++i) S[i] *= alpha;  // decay first
    std::fill(r.begin(), r.end(), 0.0f);
    for (int i = 0; i < dk; ++i)
      for (int j = 0; j < dv; ++j) r[size_t(j)] += S[i * dv + j] * kt[i];
    for (int j = 0; j < dv; ++j) u[size_t(j)] = beta[t] * (v[t * dv + j] - r[size_t(j)]);
    for (int i = 0; i < dk; ++i)
      for (int j = 0; j < dv; ++j) S[i * dv + j] += kt[i] * u[size_t(j)];
    float* ot = o + t * dv;
    std::fill(ot, ot + dv, 0.0f);
    for (int i = 0; i < dk; ++i)  // read with the updated state
      for (int j = 0; j < dv; ++j) ot[j] += S[i * dv + j] * qt[i];
  }
}

void delta_rule_chunked(const float* q, const float* k, const float* v, const float* g,
                        const float* beta, int64_t T, int dk, int dv, float* S, float* o,
                        int chunk) {
  const int w = dv + dk;  // a row of X = [U | W]
  std::vector<float> gam(static_cast<size_t>(chunk)), X(size_t(chunk * w)), vp(size_t(chunk * dv));
  for (int64_t c0 = 0; c0 < T; c0 += chunk) {
    const int L = int(std::min<int64_t>(chunk, T - c0));
    const float* qc = q + c0 * dk;
    const float* kc = k + c0 * dk;
    float acc = 0.0f;
    for (int r = 0; r < L; ++r) gam[size_t(r)] = acc += g[c0 + r];
    // Solve (I + A) X = [diag(beta) V | diag(beta * Gamma) K] by forward
    // substitution, A[r][s] = beta_r (k_r . k_s) exp(gam_r - gam_s) for s < r.
    for (int r = 0; r < L; ++r) {
      const float b = beta[c0 + r];
      float* xr = &X[size_t(r * w)];
      for (int j = 0; j < dv; ++j) xr[j] = b * v[(c0 + r) * dv + j];
      const float bg = b * std::exp(gam[size_t(r)]);
      for (int i = 0; i < dk; ++i) xr[dv + i] = bg * kc[r * dk + i];
      for (int s = 0; s < r; ++s) {
        const float a =
            b * dot(kc + r * dk, kc + s * dk, dk) * std::exp(gam[size_t(r)] - gam[size_t(s)]);
        const float* xs = &X[size_t(s * w)];
        for (int j = 0; j < w; ++j) xr[j] -= a * xs[j];
      }
    }
    // V' = U - W S0: the true per-token deltas.
    for (int r = 0; r < L; ++r) {
      float* vr = &vp[size_t(r * dv)];
      const float* xr = &X[size_t(r * w)];
      std::memcpy(vr, xr, size_t(dv) * sizeof(float));
      for (int i = 0; i < dk; ++i)
        for (int j = 0; j < dv; ++j) vr[j] -= xr[dv + i] * S[i * dv + j];
    }
    // O_r = Gamma_r q_r S0 + sum_{s <= r} (q_r . k_s) exp(gam_r - gam_s) V'_s.
    for (int r = 0; r < L; ++r) {
      float* orow = o + (c0 + r) * dv;
      const float* qr = qc + r * dk;
      const float G = std::exp(gam[size_t(r)]);
      std::fill(orow, orow + dv, 0.0f);
      for (int i = 0; i < dk; ++i)
        for (int j = 0; j < dv; ++j) orow[j] += qr[i] * S[i * dv + j];
      for (int j = 0; j < dv; ++j) orow[j] *= G;
      for (int s = 0; s <= r; ++s) {
        const float a = dot(qr, kc + s * dk, dk) * std::exp(gam[size_t(r)] - gam[size_t(s)]);
        for (int j = 0; j < dv; ++j) orow[j] += a * vp[size_t(s * dv + j)];
      }
    }
    // S_C = Gamma_C S0 + sum_r exp(gam_C - gam_r) k_r (x) V'_r.
    const float gl = gam[size_t(L - 1)];
    const float GC = std::exp(gl);
    for (int i = 0; i < dk * dv; ++i) S[i] *= GC;
    for (int r = 0; r < L; ++r) {
      const float d = std::exp(gl - gam[size_t(r)]);
      for (int i = 0; i < dk; ++i) {
        const float ki = d * kc[r * dk + i];
        for (int j = 0; j < dv; ++j) S[i * dv + j] += ki * vp[size_t(r * dv + j)];
      }
    }
  }
}

void l2_normalize(float* x, int n, float scale) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = scale / std::sqrt(float(ss) + 1e-6f);
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

namespace {

// Causal depthwise conv over the T new rows of `mixed` ([T][C], in place),
// with the previous (K-1) rows from the state, then SiLU; updates the state.
void causal_conv(const std::vector<float>& wconv, int K, int64_t C, int64_t T, float* mixed,
                 std::vector<float>& state) {
  const int64_t H = K - 1;
  std::vector<float> all(size_t((H + T) * C));  // state rows, then the new rows
  std::memcpy(all.data(), state.data(), size_t(H * C) * sizeof(float));
  std::memcpy(all.data() + H * C, mixed, size_t(T * C) * sizeof(float));
  ThreadPool::global().parallel_for(size_t(C), 256, [&](size_t c0, size_t c1, int) {
    for (size_t c = c0; c < c1; ++c) {
      const float* wc = &wconv[c * size_t(K)];
      for (int64_t t = 0; t < T; ++t) {
        float s = 0.0f;
        for (int j = 0; j < K; ++j) s += wc[j] * all[size_t((t + j) * C) + c];
        mixed[t * C + int64_t(c)] = silu(s);
      }
    }
  });
  std::memcpy(state.data(), all.data() + T * C, size_t(H * C) * sizeof(float));
}

}  // namespace

void gdn_forward(const ModelConfig& c, const GdnWeights& w, const float* x, int64_t T, GdnState& st,
                 float* out, DeltaForm form) {
  const int64_t C = c.conv_channels(), Hk = c.lin_k_heads, Hv = c.lin_v_heads;
  const int dk = c.lin_k_dim, dv = c.lin_v_dim;
  const int64_t key_dim = c.lin_key_dim(), value_dim = c.lin_value_dim();
  std::vector<float> mixed(size_t(T * C)), z(size_t(T * value_dim)), b(size_t(T * Hv)),
      a(size_t(T * Hv));
  matmul(w.in_qkv, x, T, mixed.data());
  matmul(w.in_z, x, T, z.data());
  matmul(w.in_b, x, T, b.data());
  matmul(w.in_a, x, T, a.data());
  causal_conv(w.conv, c.conv_kernel, C, T, mixed.data(), st.conv);

  if (form == DeltaForm::automatic)
    form = T >= kChunkedFrom ? DeltaForm::chunked : DeltaForm::recurrent;
  std::vector<float> y(size_t(T * value_dim));
  const int64_t ratio = Hv / Hk;
  ThreadPool::global().parallel_for(size_t(Hv), 1, [&](size_t h0, size_t h1, int) {
    std::vector<float> q(size_t(T * dk)), k(size_t(T * dk)), v(size_t(T * dv)),
        g(static_cast<size_t>(T)), beta(static_cast<size_t>(T)), o(size_t(T * dv));
    for (size_t n = h0; n < h1; ++n) {
      const int64_t m = int64_t(n) / ratio;  // value head n reads key head n / ratio
      for (int64_t t = 0; t < T; ++t) {
        const float* row = &mixed[size_t(t * C)];
        std::memcpy(&q[size_t(t * dk)], row + m * dk, size_t(dk) * sizeof(float));
        std::memcpy(&k[size_t(t * dk)], row + key_dim + m * dk, size_t(dk) * sizeof(float));
        std::memcpy(&v[size_t(t * dv)], row + 2 * key_dim + int64_t(n) * dv,
                    size_t(dv) * sizeof(float));
        l2_normalize(&q[size_t(t * dk)], dk, 1.0f / std::sqrt(float(dk)));
        l2_normalize(&k[size_t(t * dk)], dk, 1.0f);
        beta[size_t(t)] = sigmoid(b[size_t(t * Hv) + n]);
        g[size_t(t)] = -std::exp(w.a_log[n]) * softplus(a[size_t(t * Hv) + n] + w.dt_bias[n]);
      }
      float* S = &st.S[n * size_t(dk * dv)];
      if (form == DeltaForm::chunked)
        delta_rule_chunked(q.data(), k.data(), v.data(), g.data(), beta.data(), T, dk, dv, S,
                           o.data());
      else
        delta_rule_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), T, dk, dv, S,
                             o.data());
      // Gated RMSNorm per head: norm(o) * w * silu(z).
      for (int64_t t = 0; t < T; ++t) {
        float* yt = &y[size_t(t * value_dim) + n * size_t(dv)];
        const float* zt = &z[size_t(t * value_dim) + n * size_t(dv)];
        rms_norm(&o[size_t(t * dv)], w.norm.data(), dv, c.rms_eps, yt);
        for (int j = 0; j < dv; ++j) yt[j] *= silu(zt[j]);
      }
    }
  });
  matmul(w.out, y.data(), T, out);
}

}  // namespace tern::model
