#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tern {

LogprobRow::LogprobRow(std::span<const float> logits, int top)
    : logits_(logits.begin(), logits.end()) {
  const float mx = logits_.empty() ? 0.0f : *std::max_element(logits_.begin(), logits_.end());
  double sum = 0;
  for (float x : logits_) sum += std::exp(double(x) - mx);
  lse_ = double(mx) + std::log(sum);
  const size_t k = std::min(size_t(std::max(top, 0)), logits_.size());
  std::vector<int32_t> idx(logits_.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + ptrdiff_t(k), idx.end(), [&](int32_t a, int32_t b) {
    return logits_[size_t(a)] > logits_[size_t(b)] ||
           (logits_[size_t(a)] == logits_[size_t(b)] && a < b);
  });
  for (size_t i = 0; i < k; ++i)
    top_.emplace_back(idx[i], float(double(logits_[size_t(idx[i])]) - lse_));
}

TokenLogprob LogprobRow::of(int32_t token) const {
  return {token, float(double(logits_[size_t(token)]) - lse_), top_};
}

}  // namespace tern
