// Teacher-forced scoring (tern score): logits at every position of a token
// sequence, prefilled in chunks, and their comparison with reference logits.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace tern {

// [n_tokens, vocab] logits; row i follows tokens 0..i. chunk 0: all at once.
std::vector<float> score_tokens(Backend& b, std::span<const int32_t> tokens, int64_t chunk);

struct ScoreReport {
  int64_t positions = 0;
  double top1_agreement = 0, mean_kl = 0, max_abs_diff = 0;
  double ppl = 0, ppl_reference = 0, ppl_ratio = 0;
};

// KL is KL(reference || ours) per position, averaged; perplexities are of the
// sequence's own next tokens (positions 0..n-2).
ScoreReport compare_logits(const float* ours, const float* ref, int64_t n, int64_t vocab,
                           std::span<const int32_t> tokens);

}  // namespace tern
