// The arithmetic of the canonical sampler (backend/sampler.h), shared by the CPU
// twin and the CUDA kernels (backends/cuda/sample.cu) so that both choose the
// same token from the same logits. Probabilities are fixed point: a token's
// mass is round(exp(z - z_max) * 2^40), so the sums behind top-p and the draw
// are integers, exact and independent of the summation order; only exp itself
// may differ in the last bit between host and device.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"
#include "core/rng.h"

namespace tern {

// SamplingParams quantised for the kernels (made by sample_rules()).
struct SampleRules {
  float temperature = 0.0f;
  float repetition = 1.0f, presence = 0.0f, frequency = 0.0f;
  int top_k = 0;
  uint64_t top_p = 0;     // mass units; kMassOne: off
  uint64_t min_mass = 0;  // min_p in mass units (the best token has kMassOne)
  uint64_t seed = 0;
};

namespace sampling {

constexpr int kMassBits = 40;
constexpr uint64_t kMassOne = uint64_t(1) << kMassBits;
constexpr int kDrawBits = 24;
constexpr int kMaxVocab = 1 << 23;  // so that kMaxVocab * kMassOne < 2^64
__extension__ typedef unsigned __int128 u128;

// Single IEEE roundings on the device too (no fused multiply-add, no fast division).
TERN_HD inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TERN_HD inline float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
TERN_HD inline float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// The logit after the penalties for a token seen n times, divided by the
// temperature (when above 0).
TERN_HD inline float scaled_logit(float l, int n, const SampleRules& r) {
  if (n > 0) {
    l = l > 0.0f ? div_rn(l, r.repetition) : mul_rn(l, r.repetition);
    l = l - add_rn(r.presence, mul_rn(r.frequency, float(n)));
  }
  return r.temperature > 0.0f ? div_rn(l, r.temperature) : l;
}

// Order-preserving unsigned key of a float (-0 and +0 are one key).
TERN_HD inline uint32_t order_key(float z) {
  uint32_t b;
#ifdef __CUDA_ARCH__
  b = __float_as_uint(z);
#else
  std::memcpy(&b, &z, sizeof(b));
#endif
  if (b == 0x80000000u) b = 0;
  return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}

TERN_HD inline float key_value(uint32_t k) {
  const uint32_t b = (k & 0x80000000u) ? k & 0x7fffffffu : ~k;
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float z;
  std::memcpy(&z, &b, sizeof(z));
  return z;
#endif
}

// A token's unnormalised probability in mass units.
TERN_HD inline uint64_t mass(float z, float z_max) {
#ifdef __CUDA_ARCH__
  const double e = ::exp(double(z) - double(z_max));
#else
  const double e = std::exp(double(z) - double(z_max));
#endif
  return uint64_t(e * double(kMassOne) + 0.5);
}

// Whether a cumulative mass is at least the fraction top_p of total.
TERN_HD inline bool reaches(uint64_t cum, uint64_t total, uint64_t top_p) {
  return (u128(cum) << kMassBits) >= u128(total) * top_p;
}

// The draw for a step: u in [0, 1) (24 bits of splitmix64(seed ^ splitmix64(step)))
// scaled to the kept mass; the chosen token is the first, in index order,
// whose running mass exceeds it.
TERN_HD inline uint64_t draw_target(uint64_t total, uint64_t seed, uint64_t step) {
  const uint64_t u = splitmix64(seed ^ splitmix64(step)) >> (64 - kDrawBits);
  return uint64_t((u128(total) * u) >> kDrawBits);
}

}  // namespace sampling
}  // namespace tern
