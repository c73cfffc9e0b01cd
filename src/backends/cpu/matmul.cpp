#include <algorithm>
#include <vector>

#include "backends/cpu/ops.h"
#include "core/thread_pool.h"

namespace tern::cpu {

float dot(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  float s = 0.0f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = 1.0f / std::sqrt(float(ss / double(n)) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

void matmul(const QTensor& w, const float* x, int64_t T, float* y) {
  constexpr int64_t kBlock = 8;  // rows expanded at once
  const int64_t rows = w.rows, cols = w.cols;
  const size_t n_blocks = size_t((rows + kBlock - 1) / kBlock);
  ThreadPool::global().parallel_for(n_blocks, 1, [&](size_t b0, size_t b1, int) {
    std::vector<float> buf(size_t(kBlock * cols));
    for (size_t b = b0; b < b1; ++b) {
      const int64_t r0 = int64_t(b) * kBlock, nr = std::min(kBlock, rows - r0);
      for (int64_t r = 0; r < nr; ++r) w.dequant_row(r0 + r, buf.data() + r * cols);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < nr; ++r)
          y[t * rows + r0 + r] = dot(buf.data() + r * cols, x + t * cols, cols);
    }
  });
}

}  // namespace tern::cpu
