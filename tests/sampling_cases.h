// Random sampler inputs shared by the CPU and CUDA sampler tests: logits
// N(0, 3) (optionally rounded, for ties at every threshold; never zero), a
// history with repeats, and params with every feature on or off.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/sampler.h"

namespace tern::test {

struct SampleCase {
  std::vector<float> logits;
  std::vector<int32_t> history;
  SamplingParams p;
  uint64_t step = 0;
};

inline std::vector<int32_t> counts_of(const std::vector<int32_t>& history, size_t V) {
  std::vector<int32_t> c(V, 0);
  for (int32_t t : history) c[size_t(t)]++;
  return c;
}

inline SampleCase random_case(std::mt19937& g, size_t V, float tie_step = 0.0f) {
  std::normal_distribution<float> n(0.0f, 3.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  SampleCase c;
  c.logits.resize(V);
  for (float& x : c.logits) {
    x = n(g);
    if (tie_step > 0) x = std::round(x / tie_step) * tie_step;
    if (x == 0.0f) x = tie_step > 0 ? tie_step : 0.5f;
  }
  const int history = int(g() % 3) * 40;
  for (int i = 0; i < history; ++i) c.history.push_back(int32_t(g() % std::min<size_t>(V, 60)));
  const int ks[] = {0, 1, 2, 5, 40, int(V) - 1, int(V) + 3};
  c.p.temperature = g() % 8 == 0 ? 0.0f : 0.2f + 1.5f * u(g);
  c.p.top_k = ks[g() % 7];
  c.p.top_p = g() % 3 == 0 ? 1.0f : 0.05f + 0.94f * u(g);
  c.p.min_p = g() % 3 == 0 ? 0.0f : 0.3f * u(g) * u(g);
  if (g() % 2) {
    c.p.repetition_penalty = 0.7f + 0.8f * u(g);
    c.p.presence_penalty = u(g);
    c.p.frequency_penalty = 0.5f * u(g);
  }
  c.p.seed = g();
  c.step = g() % 1000;
  return c;
}

}  // namespace tern::test
