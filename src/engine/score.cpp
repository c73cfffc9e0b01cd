#include "engine/score.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tern {

std::vector<float> score_tokens(Backend& b, std::span<const int32_t> tokens, int64_t chunk) {
  const int64_t n = int64_t(tokens.size()), V = b.config().vocab;
  if (chunk <= 0) chunk = n;
  std::vector<float> all(size_t(n * V)), part;
  auto seq = b.new_sequence();
  for (int64_t s = 0; s < n; s += chunk) {
    const int64_t m = std::min(chunk, n - s);
    b.forward(*seq, tokens.subspan(size_t(s), size_t(m)), Logits::all, part);
    std::copy(part.begin(), part.end(), all.begin() + s * V);
  }
  return all;
}

namespace {

// log-softmax of one row, in double.
std::vector<double> log_softmax(const float* x, int64_t V) {
  double mx = *std::max_element(x, x + V), sum = 0.0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(double(x[i]) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) out[size_t(i)] = double(x[i]) - lse;
  return out;
}

}  // namespace

ScoreReport compare_logits(const float* ours, const float* ref, int64_t n, int64_t V,
                           std::span<const int32_t> tokens) {
  if (int64_t(tokens.size()) != n) fail("{} tokens but {} rows of logits", tokens.size(), n);
  ScoreReport r;
  r.positions = n;
  double agree = 0, kl = 0, nll = 0, nll_ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* a = ours + i * V;
    const float* b = ref + i * V;
    agree += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
    for (int64_t j = 0; j < V; ++j)
      r.max_abs_diff = std::max(r.max_abs_diff, double(std::fabs(a[j] - b[j])));
    std::vector<double> la = log_softmax(a, V), lb = log_softmax(b, V);
    for (int64_t j = 0; j < V; ++j) kl += std::exp(lb[size_t(j)]) * (lb[size_t(j)] - la[size_t(j)]);
    if (i + 1 < n) {
      const int32_t next = tokens[size_t(i + 1)];
      nll -= la[size_t(next)];
      nll_ref -= lb[size_t(next)];
    }
  }
  r.top1_agreement = agree / double(n);
  r.mean_kl = kl / double(n);
  const double m = std::max<int64_t>(n - 1, 1);
  r.ppl = std::exp(nll / m);
  r.ppl_reference = std::exp(nll_ref / m);
  r.ppl_ratio = r.ppl / r.ppl_reference;
  return r;
}

}  // namespace tern
