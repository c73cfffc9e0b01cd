// Deterministic random numbers for dummy checkpoints and tests: a counter-based
// generator, so that any tensor (or any slice of it) can be filled in parallel
// and still come out the same for a given seed.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "core/host_device.h"

namespace tern {

TERN_HD inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t hash_name(std::string_view s, uint64_t seed) {
  uint64_t h = splitmix64(seed);
  for (char c : s) h = splitmix64(h ^ uint8_t(c));
  return h;
}

// Stream of values for one (key, index) counter.
class CounterRng {
 public:
  explicit CounterRng(uint64_t key, uint64_t start = 0) : key_(key), ctr_(start) {}
  uint64_t next_u64() { return splitmix64(key_ ^ splitmix64(ctr_++)); }
  // Uniform in [0, 1).
  float uniform() { return float(next_u64() >> 40) * (1.0f / 16777216.0f); }
  // Standard normal (Box-Muller; one value per call).
  float normal() {
    float u1 = uniform() + 1e-7f, u2 = uniform();
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530718f * u2);
  }

 private:
  uint64_t key_, ctr_;
};

}  // namespace tern
