#include "model/attention.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "model/ops.h"
#include "model/rope.h"

namespace tern::model {

void apply_rope(float* x, int rot, float theta, int64_t pos) {
  const int half = rot / 2;
  for (int i = 0; i < half; ++i) {
    // As the reference: inverse frequency and angle in fp32.
    const float angle = float(pos) * rope_inv_freq(theta, i, rot);
    const float cs = std::cos(angle), sn = std::sin(angle);
    const float a = x[i], b = x[i + half];
    x[i] = a * cs - b * sn;
    x[i + half] = b * cs + a * sn;
  }
}

void attention_forward(const ModelConfig& c, const AttnWeights& w, const float* x, int64_t T,
                       int64_t pos0, KvCache& kv, float* out) {
  const int64_t H = c.n_heads, KV = c.n_kv_heads, hd = c.head_dim;
  const int64_t q_width = 2 * H * hd, kv_width = KV * hd;
  std::vector<float> qg(size_t(T * q_width)), k(size_t(T * kv_width)), v(size_t(T * kv_width));
  matmul(w.q, x, T, qg.data());
  matmul(w.k, x, T, k.data());
  matmul(w.v, x, T, v.data());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {  // [q_h | gate_h] per head; only q is normed
      float* qh = &qg[size_t(t * q_width + h * 2 * hd)];
      rms_norm(qh, w.q_norm.data(), hd, c.rms_eps, qh);
      apply_rope(qh, c.rotary_dim, c.rope_theta, pos0 + t);
    }
    for (int64_t h = 0; h < KV; ++h) {
      float* kh = &k[size_t(t * kv_width + h * hd)];
      rms_norm(kh, w.k_norm.data(), hd, c.rms_eps, kh);
      apply_rope(kh, c.rotary_dim, c.rope_theta, pos0 + t);
    }
  }
  kv.k.insert(kv.k.end(), k.begin(), k.end());
  kv.v.insert(kv.v.end(), v.begin(), v.end());

  const float scale = 1.0f / std::sqrt(float(hd));
  const int64_t group = H / KV;
  std::vector<float> attn(size_t(T * H * hd));
  ThreadPool::global().parallel_for(size_t(T * H), 1, [&](size_t i0, size_t i1, int) {
    std::vector<float> p;
    for (size_t i = i0; i < i1; ++i) {
      const int64_t t = int64_t(i) / H, h = int64_t(i) % H, g = h / group;
      const int64_t n_keys = pos0 + t + 1;  // causal: keys up to this position
      const float* q = &qg[size_t(t * q_width + h * 2 * hd)];
      p.resize(static_cast<size_t>(n_keys));
      float mx = -INFINITY;
      for (int64_t j = 0; j < n_keys; ++j) {
        p[size_t(j)] = dot(q, &kv.k[size_t(j * kv_width + g * hd)], hd) * scale;
        mx = std::max(mx, p[size_t(j)]);
      }
      double sum = 0.0;
      for (float& s : p) sum += (s = std::exp(s - mx));
      float* o = &attn[size_t(t * H * hd + h * hd)];
      std::fill(o, o + hd, 0.0f);
      for (int64_t j = 0; j < n_keys; ++j) {
        const float pj = float(p[size_t(j)] / sum);
        const float* vj = &kv.v[size_t(j * kv_width + g * hd)];
        for (int64_t d = 0; d < hd; ++d) o[d] += pj * vj[d];
      }
      const float* gate = q + hd;
      for (int64_t d = 0; d < hd; ++d) o[d] *= sigmoid(gate[d]);
    }
  });
  matmul(w.o, attn.data(), T, out);
}

}  // namespace tern::model
