// Log-probabilities of generated tokens from the raw logits they were drawn
// from (the model's distribution: before penalties, temperature, truncation
// or a grammar's mask, as OpenAI and vLLM report them).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace tern {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // the `top` most likely, best first
};

// The log-softmax of one row of logits, kept for a choice made afterwards.
class LogprobRow {
 public:
  LogprobRow(std::span<const float> logits, int top);
  TokenLogprob of(int32_t token) const;

 private:
  std::vector<float> logits_;
  double lse_ = 0;  // log sum exp
  std::vector<std::pair<int32_t, float>> top_;
};

}  // namespace tern
