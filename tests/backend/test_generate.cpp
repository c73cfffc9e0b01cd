// Backend::generate on the CPU backend (the default implementation): the same
// tokens as forward + arg-max, and what the sequence holds when a run ends.
#include <gtest/gtest.h>

#include "backends/reference/reference_backend.h"
#include "test_util.h"

namespace tern {
namespace {

// ctest runs each test in its own process, in parallel: one checkpoint per test.

TEST(Generate, GreedyEqualsForwardAndArgmax) {
  ReferenceBackend be(load_model(test::tiny_checkpoint(Layout::mlx4, 21), WeightMode::q4));
  const std::vector<int32_t> prompt = {3, 14, 15, 92};
  std::vector<int32_t> want;
  {
    auto s = be.new_sequence();
    std::vector<float> logits;
    be.forward(*s, prompt, Logits::last, logits);
    for (int i = 0; i < 12; ++i) {
      want.push_back(argmax(logits));
      be.forward(*s, std::span(&want.back(), 1), Logits::last, logits);
    }
  }
  auto s = be.new_sequence();
  std::vector<float> logits;
  const auto context = std::span(prompt).first(3);
  be.forward(*s, context, Logits::last, logits);
  std::vector<int32_t> got;
  be.start_sampling(*s, SamplingParams{}, prompt);
  be.generate(*s, prompt.back(), 12, [&](int32_t t) {
    got.push_back(t);
    return true;
  });
  EXPECT_EQ(got, want);
  EXPECT_EQ(s->length(), 4 + 11);  // the last token is not fed when max_tokens ends the run
}

TEST(Generate, StoppingFeedsTheLastToken) {
  ReferenceBackend be(load_model(test::tiny_checkpoint(Layout::mlx4, 22), WeightMode::q4));
  SamplingParams p;
  p.temperature = 0.9f;
  p.repetition_penalty = 1.2f;
  p.seed = 5;
  auto run = [&](int stop_after, std::vector<int32_t>& ids) {
    auto s = be.new_sequence();
    be.start_sampling(*s, p, std::vector<int32_t>{7});
    be.generate(*s, 7, 100, [&](int32_t t) {
      ids.push_back(t);
      return int(ids.size()) < stop_after;
    });
    return s->length();
  };
  std::vector<int32_t> a, b;
  EXPECT_EQ(run(5, a), 1 + 5);
  EXPECT_EQ(run(9, b), 1 + 9);
  EXPECT_EQ(a, std::vector<int32_t>(b.begin(), b.begin() + 5));  // seeded: same prefix
}

}  // namespace
}  // namespace tern
