// The prefill plan is a function of the prompt's prefix: two prompts that
// share tokens [0, r) and both stop at r cut [0, r) at the same positions,
// which is what lets a snapshot taken at r by one serve the other exactly.
#include <gtest/gtest.h>

#include <random>

#include "engine/prefill_plan.h"

namespace tern {
namespace {

constexpr int32_t kStart = 1, kUser = 2;

PrefillPolicy policy() {
  PrefillPolicy p;
  p.message_start = kStart;
  p.user_role = kUser;
  p.snapshot_every = 100;
  p.chunk = 16;
  return p;
}

std::vector<int64_t> positions_to(const PrefillPlan& plan, int64_t r) {
  std::vector<int64_t> v;
  for (const PrefillStop& s : plan.stops)
    if (s.at <= r) v.push_back(s.at);
  return v;
}

std::vector<int32_t> random_tokens(std::mt19937& g, size_t n) {
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = int32_t(g() % 12 == 0 ? kStart : g() % 4 == 0 ? kUser : 3 + g() % 50);
  return t;
}

TEST(PrefillPlan, StopsAreAscendingBoundedAndEndAtTheLastPromptToken) {
  std::mt19937 g(1);
  for (int trial = 0; trial < 200; ++trial) {
    const auto prompt = random_tokens(g, 2 + g() % 400);
    const PrefillPlan plan = plan_prefill(prompt, policy());
    ASSERT_FALSE(plan.stops.empty());
    EXPECT_EQ(plan.stops.back().at, int64_t(prompt.size()) - 1);
    EXPECT_TRUE(plan.stops.back().snapshot);
    int64_t prev = 0;
    for (const PrefillStop& s : plan.stops) {
      EXPECT_GT(s.at, prev);
      EXPECT_LE(s.at - prev, policy().chunk);
      prev = s.at;
    }
    for (size_t i = 1; i + 1 < prompt.size(); ++i) {
      if (prompt[i] == kStart) {
        EXPECT_TRUE(plan.stops_at(int64_t(i))) << i;
      }
    }
  }
}

TEST(PrefillPlan, APrefixIsCutTheSameWayWhateverFollowsIt) {
  std::mt19937 g(2);
  int restores = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const auto a = random_tokens(g, 2 + g() % 400);
    const size_t shared = g() % (a.size() + 1);
    auto b = std::vector<int32_t>(a.begin(), a.begin() + shared);
    const auto tail = random_tokens(g, g() % 300);
    b.insert(b.end(), tail.begin(), tail.end());
    if (b.size() < 2) continue;
    const PrefillPlan pa = plan_prefill(a, policy()), pb = plan_prefill(b, policy());
    for (const PrefillStop& s : pa.stops) {
      if (!s.snapshot || s.at > int64_t(shared) || !pb.stops_at(s.at)) continue;
      EXPECT_EQ(positions_to(pa, s.at), positions_to(pb, s.at)) << "trial " << trial;
      ++restores;
    }
  }
  EXPECT_GT(restores, 100);
}

// A turn's new tokens between two message starts run as one call, wherever
// the multiples of the chunk fall.
TEST(PrefillPlan, ChunksCountFromThePreviousStop) {
  std::vector<int32_t> prompt(60, 7);
  prompt[20] = kStart;
  prompt[30] = kStart;
  const PrefillPlan plan = plan_prefill(prompt, policy());
  EXPECT_EQ(positions_to(plan, 100), (std::vector<int64_t>{16, 20, 30, 46, 59}));
}

}  // namespace
}  // namespace tern
