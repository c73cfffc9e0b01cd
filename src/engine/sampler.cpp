#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace tern {

void validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f)) fail("temperature must be >= 0, got {}", p.temperature);
  if (p.top_k < 0) fail("top_k must be >= 0, got {}", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail("top_p must be in (0, 1], got {}", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) fail("min_p must be in [0, 1], got {}", p.min_p);
  if (!(p.repetition_penalty > 0.0f))
    fail("repetition_penalty must be > 0, got {}", p.repetition_penalty);
}

int32_t argmax(std::span<const float> logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t Sampler::sample(std::span<const float> logits_in, std::span<const int32_t> history) {
  std::vector<float> logits(logits_in.begin(), logits_in.end());
  if (p_.repetition_penalty != 1.0f || p_.presence_penalty != 0.0f ||
      p_.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : history)
      if (t >= 0 && size_t(t) < logits.size()) counts[t]++;
    for (auto [t, n] : counts) {
      float& l = logits[size_t(t)];
      l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
      l -= p_.presence_penalty + p_.frequency_penalty * float(n);
    }
  }
  if (p_.temperature == 0.0f) return argmax(logits);

  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  size_t keep = p_.top_k > 0 ? std::min(idx.size(), size_t(p_.top_k)) : idx.size();
  std::partial_sort(idx.begin(), idx.begin() + ptrdiff_t(keep), idx.end(),
                    [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  idx.resize(keep);
  std::vector<double> prob(keep);
  const double mx = logits[size_t(idx[0])];
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i)
    sum += prob[i] = std::exp((logits[size_t(idx[i])] - mx) / p_.temperature);
  for (double& q : prob) q /= sum;
  // min-p relative to the best token, then the smallest top-p nucleus.
  size_t n = keep;
  while (n > 1 && prob[n - 1] < p_.min_p * prob[0]) --n;
  double cum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cum += prob[i];
    if (cum >= p_.top_p) {
      n = i + 1;
      break;
    }
  }
  std::discrete_distribution<size_t> pick(prob.begin(), prob.begin() + ptrdiff_t(n));
  return idx[pick(rng_)];
}

}  // namespace tern
