// Small fp32 building blocks of the CPU forward pass.
#pragma once

#include <cmath>
#include <cstdint>

#include "checkpoint/quant.h"

namespace tern::model {

inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
inline float silu(float x) {
  return x * sigmoid(x);
}
// PyTorch's softplus switches to the identity above 20.
inline float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

// Sum of a[i] * b[i] with several independent accumulators (vectorisable).
float dot(const float* a, const float* b, int64_t n);

// y = x / sqrt(mean(x^2) + eps) * w, over n values (w is the multiplier).
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y);

// Y[t, :] = X[t, :] . W^T for t < T (W is [rows, cols]); rows are expanded one
// block at a time and shared by all T inputs. Runs on the global thread pool.
void matmul(const QTensor& w, const float* x, int64_t T, float* y);

}  // namespace tern::model
