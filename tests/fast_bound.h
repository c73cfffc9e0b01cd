// The bound the fast CPU backend's int8 activations are held to, shared by its
// end-to-end tests on tiny dummies and on the golden fixtures.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "engine/score.h"
#include "test_util.h"

namespace tern::test {

// int8 activations: every matmul input is rounded to 8 bits per group of 64
// (by at most d/2, d = max|x|/127 of the group), ~0.5% rms noise per matmul;
// through 4 layers that is ~1.5% of the logits' spread, plus, where two
// experts' router scores are that close, a different expert. Measured on 15
// prompts of 150 tokens (5 dummies, 3 prompts each): max |diff| 4.6-7.9% of
// max|logit|, top-1 94-98.7%, mean KL 0.0014-0.0022; on the golden fixtures
// 3.7-9.3%, top-1 85.7% (1 of 7 positions) to 100%, KL 0.0015-0.0022. Bounds,
// with margin: max |diff| 12% of max|logit|, mean KL 0.005, and the arg-max
// different at no more than 10% of the positions (one, for fewer than 10).
struct Int8Bound {
  static constexpr double max_diff = 0.12;  // of max|logit|
  static constexpr double top1_misses = 0.1, kl = 0.005;
};

inline void expect_within_int8_bound(const std::vector<float>& got, const std::vector<float>& want,
                                     std::span<const int32_t> toks, int vocab,
                                     const std::string& what) {
  const ScoreReport r = compare_logits(got.data(), want.data(), int64_t(toks.size()), vocab, toks);
  const double n = double(toks.size());
  EXPECT_LE(std::round((1 - r.top1_agreement) * n), std::max(1.0, Int8Bound::top1_misses * n))
      << what;
  EXPECT_LE(r.mean_kl, Int8Bound::kl) << what;
  EXPECT_LE(r.max_abs_diff, Int8Bound::max_diff * test::max_abs(want)) << what;
}

}  // namespace tern::test
