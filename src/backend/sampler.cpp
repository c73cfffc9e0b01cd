#include "backend/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.h"

namespace tern {

void validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f)) fail("temperature must be >= 0, got {}", p.temperature);
  if (p.top_k < 0) fail("top_k must be >= 0, got {}", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail("top_p must be in (0, 1], got {}", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) fail("min_p must be in [0, 1], got {}", p.min_p);
  if (!(p.repetition_penalty > 0.0f))
    fail("repetition_penalty must be > 0, got {}", p.repetition_penalty);
}

SamplingParams chat_sampling(uint64_t seed) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.1f;
  p.seed = seed;
  return p;
}

SampleRules sample_rules(const SamplingParams& p) {
  validate(p);
  const double one = double(sampling::kMassOne);
  SampleRules r;
  r.temperature = p.temperature;
  r.repetition = p.repetition_penalty;
  r.presence = p.presence_penalty;
  r.frequency = p.frequency_penalty;
  r.top_k = p.top_k;
  r.top_p = uint64_t(std::llround(double(p.top_p) * one));
  r.min_mass = uint64_t(std::llround(double(p.min_p) * one));
  r.seed = p.seed;
  return r;
}

int32_t argmax(std::span<const float> logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t sample_token(std::span<const float> logits, std::span<const int32_t> counts,
                     const SamplingParams& p, uint64_t step) {
  using namespace sampling;
  const size_t V = logits.size();
  if (V == 0 || V > size_t(kMaxVocab))
    fail("sample_token: {} logits (1 to {} supported)", V, kMaxVocab);
  if (!counts.empty() && counts.size() != V)
    fail("sample_token: {} counts for {} logits", counts.size(), V);
  const SampleRules r = sample_rules(p);
  std::vector<uint32_t> key(V);
  for (size_t i = 0; i < V; ++i)
    key[i] = order_key(scaled_logit(logits[i], counts.empty() ? 0 : counts[i], r));
  const size_t best = size_t(std::max_element(key.begin(), key.end()) - key.begin());
  if (r.temperature == 0.0f) return int32_t(best);
  const float z_max = key_value(key[best]);

  uint32_t top_k_key = 0;
  if (r.top_k > 0 && size_t(r.top_k) < V) {
    std::vector<uint32_t> sorted = key;
    const auto kth = sorted.begin() + (r.top_k - 1);
    std::nth_element(sorted.begin(), kth, sorted.end(), std::greater<>());
    top_k_key = *kth;
  }
  // The top-k set's masses; min-p drops from it by mass.
  std::vector<uint64_t> q(V, 0);
  std::vector<size_t> kept;
  uint64_t top_k_mass = 0;
  for (size_t i = 0; i < V; ++i) {
    if (key[i] < top_k_key) continue;
    q[i] = mass(key_value(key[i]), z_max);
    top_k_mass += q[i];
    if (q[i] >= r.min_mass) kept.push_back(i);
  }
  uint32_t top_p_key = 0;
  if (r.top_p < kMassOne) {
    std::vector<size_t> by_z = kept;
    std::sort(by_z.begin(), by_z.end(), [&](size_t a, size_t b) { return key[a] > key[b]; });
    uint64_t cum = 0;
    for (size_t i : by_z) {
      cum += q[i];
      if (q[i] > 0 && reaches(cum, top_k_mass, r.top_p)) {
        top_p_key = key[i];
        break;
      }
    }
  }
  std::erase_if(kept, [&](size_t i) { return key[i] < top_p_key; });
  uint64_t total = 0;
  for (size_t i : kept) total += q[i];
  const uint64_t target = draw_target(total, r.seed, step);
  uint64_t run = 0;
  for (size_t i : kept)
    if ((run += q[i]) > target) return int32_t(i);
  check_failed("draw target < kept mass", __FILE__, __LINE__);
}

Sampler::Sampler(const SamplingParams& p, int vocab) : p_(p), counts_(size_t(vocab), 0) {
  validate(p);
}

void Sampler::count(int32_t token) {
  if (token < 0 || size_t(token) >= counts_.size())
    fail("token id {} is outside the vocabulary [0, {})", token, counts_.size());
  counts_[size_t(token)]++;
}

int32_t Sampler::next(std::span<const float> logits) {
  const int32_t t = sample_token(logits, counts_, p_, step_++);
  counts_[size_t(t)]++;
  return t;
}

}  // namespace tern
