// The rotary embedding's inverse frequencies, 1 / theta^(2i / rot) for
// i < rot / 2, in fp32 as the reference computes them. One definition for the
// CPU (apply_rope) and the CUDA kernels (a table uploaded once): both then
// rotate by the same fp32 angle pos * inv_freq[i], which matters at long
// context (at position 262,143 one ulp of inv_freq turns the angle by ~0.03).
#pragma once

#include <cmath>
#include <vector>

namespace tern {

inline float rope_inv_freq(float theta, int i, int rot) {
  return 1.0f / std::pow(theta, float(2 * i) / float(rot));
}

inline std::vector<float> rope_inv_freqs(float theta, int rot) {
  std::vector<float> f(size_t(rot / 2));
  for (int i = 0; i < rot / 2; ++i) f[size_t(i)] = rope_inv_freq(theta, i, rot);
  return f;
}

}  // namespace tern
