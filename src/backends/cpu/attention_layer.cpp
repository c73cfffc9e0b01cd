#include "backends/cpu/attention_layer.h"

#include <algorithm>
#include <cmath>

#include "model/ops.h"
#include "model/rope.h"

namespace tern::cpu {

namespace {

constexpr int64_t kQueryBlock = 16;   // queries of one KV head an item
constexpr int64_t kSplitKeys = 1024;  // one query's keys per item when few queries

}  // namespace

void AttentionLayer::forward(Context& ctx, const ModelConfig& c, const AttnWeights& w,
                             const Activations& x, int64_t T, std::span<const SeqRows> seqs,
                             float* out) {
  const int64_t H = c.n_heads, KV = c.n_kv_heads, hd = c.head_dim, group = H / KV;
  const int64_t q_width = 2 * H * hd, kv_width = KV * hd;
  float* qg = grow(qg_, size_t(T * q_width));
  float* kb = grow(k_, size_t(T * kv_width));
  float* vb = grow(v_, size_t(T * kv_width));
  const MatmulJob proj[] = {{&w.q, &x, nullptr, T, {qg, q_width}},
                            {&w.k, &x, nullptr, T, {kb, kv_width}},
                            {&w.v, &x, nullptr, T, {vb, kv_width}}};
  ctx.mm.run(ctx.pool, ctx.k, proj);

  int32_t* seq_of = grow(seq_of_, size_t(T));
  for (size_t i = 0; i < seqs.size(); ++i)
    std::fill(seq_of + seqs[i].t0, seq_of + seqs[i].t0 + seqs[i].n, int32_t(i));
  auto pos = [&](int64_t t) {
    const SeqRows& s = seqs[size_t(seq_of[t])];
    return s.pos0 + t - s.t0;
  };
  // RoPE angles as apply_rope computes them (fp32), once per row.
  const int half = c.rotary_dim / 2;
  float* cs = grow(cos_, size_t(T * half));
  float* sn = grow(sin_, size_t(T * half));
  for (int i = 0; i < half; ++i) {
    const float inv_freq = rope_inv_freq(c.rope_theta, i, c.rotary_dim);
    for (int64_t t = 0; t < T; ++t) {
      const float angle = float(pos(t)) * inv_freq;
      cs[t * half + i] = std::cos(angle);
      sn[t * half + i] = std::sin(angle);
    }
  }
  auto norm_rope = [&](float* x_h, const std::vector<float>& norm, int64_t t) {
    model::rms_norm(x_h, norm.data(), hd, c.rms_eps, x_h);
    for (int i = 0; i < half; ++i) {
      const float a = x_h[i], b = x_h[i + half];
      x_h[i] = a * cs[t * half + i] - b * sn[t * half + i];
      x_h[i + half] = b * cs[t * half + i] + a * sn[t * half + i];
    }
  };
  ctx.pool.run(size_t(T), [&](size_t t, int) {
    for (int64_t h = 0; h < H; ++h) norm_rope(qg + int64_t(t) * q_width + h * 2 * hd, w.q_norm, t);
    for (int64_t h = 0; h < KV; ++h) norm_rope(kb + int64_t(t) * kv_width + h * hd, w.k_norm, t);
  });
  // Append to each cache; capacity grows geometrically (no reallocation per token).
  for (const SeqRows& s : seqs) {
    model::KvCache& kv = *s.kv;
    const size_t n_after = kv.k.size() + size_t(s.n * kv_width);
    if (kv.k.capacity() < n_after) {
      kv.k.reserve(std::max(n_after, 2 * kv.k.capacity()));
      kv.v.reserve(std::max(n_after, 2 * kv.v.capacity()));
    }
    kv.k.insert(kv.k.end(), kb + s.t0 * kv_width, kb + (s.t0 + s.n) * kv_width);
    kv.v.insert(kv.v.end(), vb + s.t0 * kv_width, vb + (s.t0 + s.n) * kv_width);
  }

  // Items per sequence: (KV head, query block, key range); few queries split
  // their keys (by the sequence's own rows, as alone).
  items_.clear();
  splits_.clear();
  int64_t qb_max = 1;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t n = seqs[i].n, n_keys = seqs[i].pos0 + n, qb = std::min(n, kQueryBlock);
    const int64_t n_qb = (n + qb - 1) / qb;
    const int64_t splits =
        KV * n_qb >= 2 * ctx.pool.size() ? 1 : std::max<int64_t>(1, n_keys / kSplitKeys);
    const int64_t per_split = (n_keys + splits - 1) / splits;
    splits_.push_back({items_.size(), qb, n_qb, splits});
    qb_max = std::max(qb_max, qb);
    for (int64_t g = 0; g < KV; ++g)
      for (int64_t b = 0; b < n_qb; ++b)
        for (int64_t s = 0; s < splits; ++s)
          items_.push_back({int(i), int(g), b * qb, std::min(n, (b + 1) * qb), s * per_split,
                            std::min(n_keys, (s + 1) * per_split)});
  }
  const size_t rows = size_t(qb_max * group), part = rows * size_t(hd + 2);
  float* parts = grow(part_, items_.size() * part);
  scratch_.reserve(ctx.pool.size(), attn_scratch_floats(int(group), qb_max, int(hd)));
  const float scale = 1.0f / std::sqrt(float(hd));
  ctx.pool.run(items_.size(), [&](size_t i, int thread) {
    const Item& it = items_[i];
    const SeqRows& s = seqs[size_t(it.seq)];
    const size_t n_rows = size_t(splits_[size_t(it.seq)].qb * group);
    float* p = parts + i * part;
    const AttnArgs a{qg + (s.t0 + it.i0) * q_width + it.g * group * 2 * hd,
                     q_width,
                     2 * hd,
                     int(group),
                     int(hd),
                     it.i1 - it.i0,
                     s.pos0 + it.i0,
                     s.kv->k.data() + it.g * hd,
                     s.kv->v.data() + it.g * hd,
                     kv_width,
                     it.k0,
                     it.k1,
                     scale,
                     p,
                     p + n_rows,
                     p + 2 * n_rows,
                     scratch_.at(thread)};
    ctx.k.attention(a);
  });

  // Merge the key ranges of each (query, head), normalise, gate.
  float* attn = grow(attn_, size_t(T * H * hd));
  ctx.pool.run(size_t(T), [&](size_t t, int) {
    const Split& sp = splits_[size_t(seq_of[t])];
    const int64_t r = int64_t(t) - seqs[size_t(seq_of[t])].t0;
    const int64_t b = r / sp.qb, i = r - b * sp.qb, n_rows = sp.qb * group;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / group, row = i * group + h % group;
      const float* first = parts + (sp.item0 + size_t((g * sp.n_qb + b) * sp.splits)) * part;
      float mx = -INFINITY;
      for (int64_t s = 0; s < sp.splits; ++s) mx = std::max(mx, first[s * part + row]);
      float* o = attn + int64_t(t) * H * hd + h * hd;
      std::fill(o, o + hd, 0.0f);
      float l = 0.0f;
      for (int64_t s = 0; s < sp.splits; ++s) {
        const float* p = first + s * part;
        if (p[row] == -INFINITY) continue;  // no visible key in this range
        const float f = std::exp(p[row] - mx);
        l += f * p[n_rows + row];
        const float* po = p + 2 * n_rows + row * hd;
        for (int64_t d = 0; d < hd; ++d) o[d] += f * po[d];
      }
      const float* gate = qg + int64_t(t) * q_width + h * 2 * hd + hd;
      for (int64_t d = 0; d < hd; ++d) o[d] = o[d] / l * model::sigmoid(gate[d]);
    }
  });
  aa_.set(ctx.pool, ctx.k, attn, H * hd, T, H * hd, ctx.int8);
  const MatmulJob o_proj[] = {{&w.o, &aa_, nullptr, T, {out, c.hidden}}};
  ctx.mm.run(ctx.pool, ctx.k, o_proj);
}

}  // namespace tern::cpu
