// The canonical sampler against a brute-force double-precision reference that
// follows the definition word for word (sorting, std::map counts, normalised
// probabilities): thresholds by value with their ties, penalties, the draw in
// index order. Ids must be equal; the fixed-point masses differ from the
// reference only within ~2^-40 of a boundary, which random logits never hit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "backend/sampler.h"
#include "core/error.h"
#include "sampling_cases.h"

namespace tern {
namespace {

using test::counts_of;
using test::random_case;
using test::SampleCase;

int32_t reference(const std::vector<float>& logits, const std::vector<int32_t>& history,
                  const SamplingParams& p, uint64_t step) {
  std::map<int32_t, int> seen;
  for (int32_t t : history) seen[t]++;
  std::vector<float> l = logits;
  for (auto [t, n] : seen) {
    float& x = l[size_t(t)];
    x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
    x -= p.presence_penalty + p.frequency_penalty * float(n);
  }
  if (p.temperature == 0) return argmax(l);
  const size_t V = l.size();
  std::vector<float> z(V);
  for (size_t i = 0; i < V; ++i) z[i] = l[i] / p.temperature;
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return z[a] > z[b]; });
  const double z_max = z[order[0]];
  const float z_k = p.top_k > 0 && size_t(p.top_k) < V ? z[order[size_t(p.top_k) - 1]] : -INFINITY;
  std::vector<double> e(V, 0.0);
  std::vector<bool> keep(V, false);
  double top_k_sum = 0;
  for (size_t i = 0; i < V; ++i)
    if (z[i] >= z_k) top_k_sum += e[i] = std::exp(double(z[i]) - z_max);
  for (size_t i = 0; i < V; ++i) keep[i] = z[i] >= z_k && e[i] >= double(p.min_p);
  if (p.top_p < 1.0f) {
    float z_p = -INFINITY;
    double cum = 0;
    for (size_t i : order) {
      if (!keep[i]) continue;
      cum += e[i] / top_k_sum;
      if (cum >= double(p.top_p)) {
        z_p = z[i];
        break;
      }
    }
    for (size_t i = 0; i < V; ++i) keep[i] = keep[i] && z[i] >= z_p;
  }
  double total = 0;
  for (size_t i = 0; i < V; ++i) total += keep[i] ? e[i] : 0.0;
  const double u = double(splitmix64(p.seed ^ splitmix64(step)) >> 40) / 16777216.0;
  double run = 0;
  for (size_t i = 0; i < V; ++i)
    if (keep[i] && (run += e[i]) > u * total) return int32_t(i);
  ADD_FAILURE() << "reference drew nothing";
  return -1;
}

// How often each token is drawn from l over steps 0..draws-1 (no history).
std::vector<int> draw_counts(const std::vector<float>& l, const SamplingParams& p, int draws) {
  std::vector<int> hits(l.size(), 0);
  for (uint64_t s = 0; s < uint64_t(draws); ++s) hits[size_t(sample_token(l, {}, p, s))]++;
  return hits;
}

void expect_matches_reference(uint32_t seed, size_t V, float tie_step, int cases) {
  std::mt19937 g(seed);
  for (int i = 0; i < cases; ++i) {
    const SampleCase c = random_case(g, V, tie_step);
    const auto counts = counts_of(c.history, V);
    ASSERT_EQ(sample_token(c.logits, counts, c.p, c.step),
              reference(c.logits, c.history, c.p, c.step))
        << "case " << i << ": T " << c.p.temperature << " top_k " << c.p.top_k << " top_p "
        << c.p.top_p << " min_p " << c.p.min_p << " rep " << c.p.repetition_penalty;
  }
}

TEST(Sampler, MatchesReferenceOnRandomLogits) {
  expect_matches_reference(1, 50, 0.0f, 1500);
  expect_matches_reference(2, 1000, 0.0f, 600);
  expect_matches_reference(3, 5000, 0.0f, 100);
}

TEST(Sampler, MatchesReferenceWithTiesAtThresholds) {
  expect_matches_reference(4, 40, 0.5f, 1500);
  expect_matches_reference(5, 700, 0.25f, 600);
}

TEST(Sampler, TiesAtTheTopKThresholdAreKept) {
  // Three tokens tie for second place: top_k = 2 keeps all four.
  const std::vector<float> l = {5.0f, 1.0f, 3.0f, 3.0f, 3.0f, -2.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  const std::vector<int> hits = draw_counts(l, p, 4000);
  EXPECT_EQ(hits[1] + hits[5], 0);
  for (int i : {2, 3, 4}) EXPECT_GT(hits[size_t(i)], 200) << i;
}

TEST(Sampler, MinPOneKeepsTheTiedBest) {
  const std::vector<float> l = {1.0f, 4.0f, 3.99f, 4.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 1.0f;
  const std::vector<int> hits = draw_counts(l, p, 1000);
  EXPECT_EQ(hits[0] + hits[2], 0);
  EXPECT_GT(hits[1], 400);
  EXPECT_GT(hits[3], 400);
}

TEST(Sampler, TopKOneIsArgmax) {
  std::mt19937 g(6);
  for (int i = 0; i < 200; ++i) {
    SampleCase c = random_case(g, 300, 0.0f);
    c.p.top_k = 1;
    c.p.temperature = 1.0f;
    c.history.clear();
    EXPECT_EQ(sample_token(c.logits, {}, c.p, c.step), argmax(c.logits));
  }
}

TEST(Sampler, PenaltiesMoveTheArgmax) {
  const std::vector<float> l = {2.0f, 1.9f, -0.5f, -0.4f};
  SamplingParams p;
  p.repetition_penalty = 1.1f;  // 2.0 / 1.1 < 1.9
  EXPECT_EQ(sample_token(l, std::vector<int32_t>{1, 0, 0, 0}, p, 0), 1);
  EXPECT_EQ(sample_token(l, std::vector<int32_t>{0, 0, 0, 0}, p, 0), 0);
  p.repetition_penalty = 1.0f;
  p.frequency_penalty = 0.06f;  // 2.0 - 2 * 0.06 < 1.9
  EXPECT_EQ(sample_token(l, std::vector<int32_t>{1, 0, 0, 0}, p, 0), 0);
  EXPECT_EQ(sample_token(l, std::vector<int32_t>{2, 0, 0, 0}, p, 0), 1);
  // A negative logit is multiplied: -0.4 * 1.5 < -0.5.
  const std::vector<float> m = {-0.5f, -0.4f};
  p = SamplingParams{};
  p.repetition_penalty = 1.5f;
  EXPECT_EQ(sample_token(m, std::vector<int32_t>{0, 1}, p, 0), 0);
}

TEST(Sampler, FrequenciesFollowTheKeptProbabilities) {
  const std::vector<float> l = {1.0f, 0.2f, -0.3f, 0.7f, -3.0f, 0.9f};
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 4;  // drops -0.3 and -3.0
  p.seed = 99;
  Sampler s(p, int(l.size()));
  std::vector<double> hits(l.size(), 0);
  constexpr int kN = 40000;
  for (int i = 0; i < kN; ++i) hits[size_t(s.next(l))] += 1.0 / kN;
  double sum = 0;
  for (size_t i : {0, 1, 3, 5}) sum += std::exp(l[i] / 0.9);
  for (size_t i : {0, 1, 3, 5}) EXPECT_NEAR(hits[i], std::exp(l[i] / 0.9) / sum, 0.01) << i;
  EXPECT_EQ(hits[2] + hits[4], 0.0);
}

TEST(Sampler, SeededRunsRepeatAndSeedsDiffer) {
  std::mt19937 g(7);
  const SampleCase c = random_case(g, 500, 0.0f);
  SamplingParams p;
  p.temperature = 1.0f;
  auto run = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p, 500);
    std::vector<int32_t> ids;
    for (int i = 0; i < 50; ++i) ids.push_back(s.next(c.logits));
    return ids;
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_NE(run(1), run(2));
}

// The history it is given, then every token it chose, at the draw's number.
TEST(Sampler, SamplerCountsItsHistoryAndItsChoices) {
  std::mt19937 g(8);
  for (int i = 0; i < 100; ++i) {
    SampleCase c = random_case(g, 200, 0.0f);
    Sampler s(c.p, 200);
    for (int32_t t : c.history) s.count(t);
    for (uint64_t step = 0; step < 3; ++step) {
      const int32_t want = sample_token(c.logits, counts_of(c.history, 200), c.p, step);
      EXPECT_EQ(s.next(c.logits), want);
      c.history.push_back(want);
    }
    EXPECT_EQ(s.draws(), 3u);
  }
  Sampler s(SamplingParams{}, 10);
  EXPECT_THROW(s.count(10), Error);
}

TEST(Sampler, RejectsBadParams) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_THROW(validate(p), Error);
  p = SamplingParams{};
  p.min_p = 1.5f;
  EXPECT_THROW(validate(p), Error);
  p = SamplingParams{};
  p.temperature = -1.0f;
  EXPECT_THROW(Sampler(p, 10), Error);
  EXPECT_THROW(sample_token(std::vector<float>(4, 1.0f), std::vector<int32_t>(3, 0), {}, 0), Error);
}

}  // namespace
}  // namespace tern
