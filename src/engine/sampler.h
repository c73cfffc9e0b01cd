// Choosing the next token from logits: greedy (temperature 0) or sampling with
// temperature, top-k, top-p, min-p and repetition / presence / frequency
// penalties, seeded so that a run can be repeated.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace tern {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
};

void validate(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) { validate(p); }
  // `history`: the tokens the penalties look at (prompt and generated so far).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace tern
