#include "backends/cpu/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/ops.h"

namespace tern::cpu {

namespace {

constexpr int kMaxTopK = 32;

}  // namespace

void route(const float* logits, int n_experts, int top_k, bool renormalise, int32_t* experts,
           float* weights) {
  TERN_CHECK(top_k <= kMaxTopK && top_k <= n_experts);
  const float mx = *std::max_element(logits, logits + n_experts);
  double sum = 0.0;
  for (int e = 0; e < n_experts; ++e) sum += std::exp(logits[e] - mx);
  // Insertion into the k best so far (larger probability first, ties: lower id).
  float best[kMaxTopK];
  int n = 0;
  for (int e = 0; e < n_experts; ++e) {
    const float p = float(std::exp(logits[e] - mx) / sum);
    if (n == top_k && !(p > best[n - 1])) continue;
    int i = n < top_k ? n++ : n - 1;
    for (; i > 0 && p > best[i - 1]; --i) {
      best[i] = best[i - 1];
      experts[i] = experts[i - 1];
    }
    best[i] = p;
    experts[i] = e;
  }
  float total = 0.0f;
  for (int i = 0; i < top_k; ++i) total += best[i];
  for (int i = 0; i < top_k; ++i) weights[i] = renormalise ? best[i] / total : best[i];
}

void MoeLayer::forward(Context& ctx, const ModelConfig& c, const MoeWeights& w,
                       const Activations& x, int64_t T, float* out) {
  const int64_t D = c.hidden, E = c.n_experts, I = c.moe_inter, Is = c.shared_inter;
  const int K = c.top_k;
  float* logits = grow(logits_, size_t(T * E));
  float* sgate = grow(gate_, size_t(T));
  const MatmulJob router[] = {{&w.router, &x, nullptr, T, {logits, E}},
                              {&w.shared_expert_gate, &x, nullptr, T, {sgate, 1}}};
  ctx.mm.run(ctx.pool, ctx.k, router);

  // Route, then group the (token, weight) pairs by expert, tokens ascending.
  int32_t* picked = grow(picked_, size_t(T * K));
  float* pw = grow(wt_, size_t(2 * T * K + T));
  float* wt = pw + T * K;  // grouped weights
  float* shared_wt = wt + T * K;
  for (int64_t t = 0; t < T; ++t) {
    route(logits + t * E, int(E), K, c.norm_topk, picked + t * K, pw + t * K);
    shared_wt[t] = model::sigmoid(sgate[t]);
  }
  int32_t* count = grow(count_, size_t(E));
  int32_t* offset = grow(offset_, size_t(E + 1));
  int32_t* tok = grow(tok_, size_t(T * K));
  std::fill(count, count + E, 0);
  for (int64_t i = 0; i < T * K; ++i) ++count[picked[i]];
  offset[0] = 0;
  for (int64_t e = 0; e < E; ++e) offset[e + 1] = offset[e] + count[e];
  std::fill(count, count + E, 0);
  for (int64_t t = 0; t < T; ++t)
    for (int i = 0; i < K; ++i) {
      const int32_t e = picked[t * K + i];
      const int32_t at = offset[e] + count[e]++;
      tok[at] = int32_t(t);
      wt[at] = pw[t * K + i];
    }
  const int64_t rows = T * K;
  int32_t* iota = grow(iota_, size_t(std::max(rows, T)));
  std::iota(iota, iota + std::max(rows, T), 0);

  // Gate, up and SwiGLU: items of (expert, block of its hidden rows).
  float* h = grow(h_, size_t(rows * I));
  float* u = grow(u_, size_t(rows * I));
  float* hs = grow(hs_, size_t(T * Is));
  float* us = grow(us_, size_t(T * Is));
  items_.clear();
  for (int64_t e = 0; e <= E; ++e) {
    if (e < E && count[e] == 0) continue;
    const int64_t n = e < E ? I : Is,
                  step = rows_per_item(e < E ? w.gate[size_t(e)] : w.shared_gate,
                                       e < E ? count[e] : T, ctx.pool.size());
    for (int64_t r = 0; r < n; r += step) items_.push_back({int(e), r, std::min(n, r + step)});
  }
  ctx.pool.run(items_.size(), [&](size_t i, int) {
    const Item& it = items_[i];
    const bool shared = it.expert == E;
    const int64_t n = shared ? T : count[it.expert], ld = shared ? Is : I;
    const int64_t row0 = shared ? 0 : offset[it.expert];
    const int32_t* index = shared ? nullptr : tok + row0;
    float *hg = (shared ? hs : h) + row0 * ld, *hu = (shared ? us : u) + row0 * ld;
    const MatmulJob g{shared ? &w.shared_gate : &w.gate[size_t(it.expert)], &x, index, n, {hg, ld}};
    const MatmulJob up{shared ? &w.shared_up : &w.up[size_t(it.expert)], &x, index, n, {hu, ld}};
    matmul_rows(ctx.k, g, it.r0, it.r1);
    matmul_rows(ctx.k, up, it.r0, it.r1);
    for (int64_t t = 0; t < n; ++t)
      ctx.k.silu_mul(hg + t * ld + it.r0, hu + t * ld + it.r0, hg + t * ld + it.r0, it.r1 - it.r0);
  });
  ha_.set(ctx.pool, ctx.k, h, I, rows, I, ctx.int8);
  hsa_.set(ctx.pool, ctx.k, hs, Is, T, Is, ctx.int8);

  // Down projections and the combine: items of output rows, every expert in each.
  std::fill(out, out + T * D, 0.0f);
  const int64_t step = rows_per_item(w.shared_down, T, ctx.pool.size());
  ctx.pool.run(size_t((D + step - 1) / step), [&](size_t i, int) {
    const int64_t r0 = int64_t(i) * step, r1 = std::min(D, r0 + step);
    for (int64_t e = 0; e < E; ++e) {
      if (count[e] == 0) continue;
      const int64_t at = offset[e];
      const MatmulJob d{
          &w.down[size_t(e)], &ha_, iota + at, count[e], {out, D, tok + at, wt + at, true}};
      matmul_rows(ctx.k, d, r0, r1);
    }
    const MatmulJob d{&w.shared_down, &hsa_, nullptr, T, {out, D, nullptr, shared_wt, true}};
    matmul_rows(ctx.k, d, r0, r1);
  });
}

}  // namespace tern::cpu
