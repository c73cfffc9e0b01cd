#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "model/ops.h"

namespace tern::model {

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

namespace {

// One packed row dotted with x without expanding it: per group,
// sum (s*q + b) * x = s * sum(q * x) + b * sum(x), with sum(x) precomputed.
// `xt` holds x reordered per group so that code j of word k multiplies
// xt[j * words_per_group + k]: the inner loop then shifts every word of the
// group by the same amount, which vectorises without per-lane shifts.
template <int kBits>
[[gnu::always_inline]] inline float dot_affine_row(const QTensor& w, int64_t r, const float* xt,
                                                   const float* xsum) {
  constexpr int kPerWord = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1;
  constexpr int kWords = 64 / kPerWord;  // words per group of 64
  const auto* words = reinterpret_cast<const uint32_t*>(w.data + size_t(r) * w.row_bytes());
  const size_t G = w.groups_per_row(), g0 = size_t(r) * G;
  float total = 0.0f;
  for (size_t g = 0; g < G; ++g) {
    float acc[kWords] = {};
    const uint32_t* wg = words + g * kWords;
    const float* xg = xt + g * 64;
    for (int j = 0; j < kPerWord; ++j)
      for (int k = 0; k < kWords; ++k)
        acc[k] += float((wg[k] >> (kBits * j)) & kMask) * xg[j * kWords + k];
    float qx = 0.0f;
    for (int k = 0; k < kWords; ++k) qx += acc[k];
    total += load_scalar(w.dtype, w.scales, g0 + g) * qx +
             load_scalar(w.dtype, w.biases, g0 + g) * xsum[g];
  }
  return total;
}

// Built for AVX2 as well as the baseline, chosen at run time.
__attribute__((target_clones("avx2", "default"))) float dot_q4_row(const QTensor& w, int64_t r,
                                                                   const float* xt,
                                                                   const float* xsum) {
  return dot_affine_row<4>(w, r, xt, xsum);
}

__attribute__((target_clones("avx2", "default"))) float dot_q8_row(const QTensor& w, int64_t r,
                                                                   const float* xt,
                                                                   const float* xsum) {
  return dot_affine_row<8>(w, r, xt, xsum);
}

// Few input rows (decode): read each packed row once and never expand it.
void matmul_affine_few(const QTensor& w, const float* x, int64_t T, float* y) {
  const size_t G = w.groups_per_row();
  const int per_word = 32 / w.bits, words = 64 / per_word;
  std::vector<float> xsum(size_t(T) * G), xt(size_t(T * w.cols));
  for (int64_t t = 0; t < T; ++t)
    for (size_t g = 0; g < G; ++g) {
      const float* xg = x + t * w.cols + int64_t(g) * 64;
      float* xtg = &xt[size_t(t * w.cols) + g * 64];
      float s = 0.0f;
      for (int i = 0; i < 64; ++i) {
        s += xg[i];
        xtg[(i % per_word) * words + i / per_word] = xg[i];
      }
      xsum[size_t(t) * G + g] = s;
    }
  ThreadPool::global().parallel_for(size_t(w.rows), 16, [&](size_t r0, size_t r1, int) {
    for (size_t r = r0; r < r1; ++r)
      for (int64_t t = 0; t < T; ++t) {
        const float* xtt = &xt[size_t(t * w.cols)];
        const float* st = &xsum[size_t(t) * G];
        y[t * w.rows + int64_t(r)] =
            w.bits == 4 ? dot_q4_row(w, int64_t(r), xtt, st) : dot_q8_row(w, int64_t(r), xtt, st);
      }
  });
}

}  // namespace

void matmul(const QTensor& w, const float* x, int64_t T, float* y) {
  if (w.quantized() && T <= 4 && w.group == 64) return matmul_affine_few(w, x, T, y);
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

}  // namespace tern::model
