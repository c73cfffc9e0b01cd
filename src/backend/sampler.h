// Choosing the next token from logits: greedy (temperature 0) or sampling with
// temperature, top-k, top-p, min-p and repetition / presence / frequency
// penalties, seeded so that a run can be repeated. sample_token() is the one
// definition; the CUDA sampler (backends/cuda/sample.cu) is its twin.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/sampling_rules.h"

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

  bool penalised() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
  // Plain arg-max of the logits.
  bool greedy() const { return temperature == 0.0f && !penalised(); }
};

void validate(const SamplingParams& p);

// Typical chat settings (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05,
// repetition penalty 1.1): what `tern bench --sample` times; the tests use them too.
SamplingParams chat_sampling(uint64_t seed);
SampleRules sample_rules(const SamplingParams& p);

// First index of the largest logit.
int32_t argmax(std::span<const float> logits);

// The token chosen at draw number `step`. counts[i]: times token i occurs in
// the history (empty: none). Each logit gets the penalties of its count
// (repetition divides a positive logit and multiplies a negative one; presence
// and frequency x count are subtracted). Temperature 0 then takes the arg-max.
// Otherwise z = logit / T and the kept set is cut by value, keeping every tie
// at a threshold: top-k keeps z >= the k-th largest z; min-p keeps
// p >= min_p * p_max; top-p, with p normalised over the top-k set, keeps
// z >= the z at which the kept tokens, taken by z descending, first reach a
// mass of top_p. The draw walks the kept tokens in index order and picks the
// first whose running mass exceeds u * (kept mass), u from (seed, step).
// Masses are fixed point (sampling_rules.h).
int32_t sample_token(std::span<const float> logits, std::span<const int32_t> counts,
                     const SamplingParams& p, uint64_t step);

// sample_token over a growing history, one draw per call: the state of one
// completion (penalty counts, draw counter), which a Sequence carries so that a
// completion split over several generate() calls draws what one call would.
class Sampler {
 public:
  Sampler(const SamplingParams& p, int vocab);
  // Counts a token of the history (the penalties look at it).
  void count(int32_t token);
  // The next token, counted as history from then on.
  int32_t next(std::span<const float> logits);
  const SamplingParams& params() const { return p_; }
  uint64_t draws() const { return step_; }

 private:
  SamplingParams p_;
  std::vector<int32_t> counts_;
  uint64_t step_ = 0;
};

}  // namespace tern
