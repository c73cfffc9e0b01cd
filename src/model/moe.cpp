#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/ops.h"

namespace tern::model {

Route route_token(const float* logits, int n_experts, int top_k, bool renormalise) {
  float mx = *std::max_element(logits, logits + n_experts);
  std::vector<float> p(static_cast<size_t>(n_experts));
  double sum = 0.0;
  for (int e = 0; e < n_experts; ++e) sum += (p[size_t(e)] = std::exp(logits[e] - mx));
  for (float& x : p) x = float(x / sum);
  std::vector<int> idx(static_cast<size_t>(n_experts));
  std::iota(idx.begin(), idx.end(), 0);
  // Larger probability first; ties go to the lower expert id.
  std::partial_sort(idx.begin(), idx.begin() + top_k, idx.end(), [&](int a, int b) {
    return p[size_t(a)] != p[size_t(b)] ? p[size_t(a)] > p[size_t(b)] : a < b;
  });
  Route r;
  r.experts.assign(idx.begin(), idx.begin() + top_k);
  float total = 0.0f;
  for (int e : r.experts) total += p[size_t(e)];
  for (int e : r.experts) r.weights.push_back(renormalise ? p[size_t(e)] / total : p[size_t(e)]);
  return r;
}

namespace {

// y[n][D] = down(silu(gate(x)) * up(x)) for the n rows of x.
void swiglu_ffn(const QTensor& gate, const QTensor& up, const QTensor& down, const float* x,
                int64_t n, float* y) {
  const int64_t I = gate.rows;
  std::vector<float> g(size_t(n * I)), u(size_t(n * I));
  matmul(gate, x, n, g.data());
  matmul(up, x, n, u.data());
  for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
  matmul(down, g.data(), n, y);
}

}  // namespace

void moe_forward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t T, float* out) {
  const int64_t D = c.hidden, E = c.n_experts;
  std::vector<float> logits(size_t(T * E));
  matmul(w.router, x, T, logits.data());
  // Group the tokens by expert.
  std::vector<std::vector<std::pair<int64_t, float>>> rows(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    Route r = route_token(&logits[size_t(t * E)], int(E), c.top_k, c.norm_topk);
    for (int i = 0; i < c.top_k; ++i)
      rows[size_t(r.experts[size_t(i)])].push_back({t, r.weights[size_t(i)]});
  }
  std::fill(out, out + T * D, 0.0f);
  std::vector<float> xe, ye;
  for (int64_t e = 0; e < E; ++e) {  // ascending expert id, as the reference adds them
    const auto& rs = rows[size_t(e)];
    if (rs.empty()) continue;
    const int64_t n = int64_t(rs.size());
    xe.resize(size_t(n * D));
    ye.resize(size_t(n * D));
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + rs[size_t(i)].first * D, D, &xe[size_t(i * D)]);
    swiglu_ffn(w.gate[size_t(e)], w.up[size_t(e)], w.down[size_t(e)], xe.data(), n, ye.data());
    for (int64_t i = 0; i < n; ++i) {
      float* o = out + rs[size_t(i)].first * D;
      const float wt = rs[size_t(i)].second;
      for (int64_t d = 0; d < D; ++d) o[d] += wt * ye[size_t(i * D + d)];
    }
  }
  std::vector<float> shared(size_t(T * D)), sg(static_cast<size_t>(T));
  swiglu_ffn(w.shared_gate, w.shared_up, w.shared_down, x, T, shared.data());
  matmul(w.shared_expert_gate, x, T, sg.data());
  for (int64_t t = 0; t < T; ++t) {
    const float gate = sigmoid(sg[size_t(t)]);
    for (int64_t d = 0; d < D; ++d) out[t * D + d] += gate * shared[size_t(t * D + d)];
  }
}

}  // namespace tern::model
