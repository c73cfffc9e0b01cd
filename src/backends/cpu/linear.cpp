#include "backends/cpu/linear.h"

#include <algorithm>

namespace tern::cpu {

void Activations::set(ThreadPool& pool, const Kernels& k, const float* x, int64_t ld, int64_t T,
                      int64_t cols, bool int8) {
  x_ = x;
  ld_ = ld;
  cols_ = cols;
  quantized_ = int8 && cols % kGroup == 0;  // else no 4-bit matrix takes them as codes
  if (!quantized_) return;
  const int64_t G = cols / kGroup;
  int8_t* q = grow(q_, size_t(T * cols));
  float* d = grow(d_, size_t(T * G));
  float* s = grow(s_, size_t(T * G));
  const size_t per = size_t(std::max<int64_t>(1, 16384 / cols));  // rows an item
  pool.run((size_t(T) + per - 1) / per, [&](size_t i, int) {
    const int64_t t1 = std::min<int64_t>(T, int64_t((i + 1) * per));
    for (int64_t t = int64_t(i * per); t < t1; ++t)
      k.quantize(x + t * ld, cols, q + t * cols, d + t * G, s + t * G);
  });
}

void matmul_rows(const Kernels& k, const MatmulJob& j, int64_t r0, int64_t r1) {
  if (gemm_q4_takes(*j.w) && j.in->quantized())
    k.gemm_q4(*j.w, r0, r1, j.in->q(j.index), j.T, j.out);
  else
    k.gemm_f32(*j.w, r0, r1, j.in->f(j.index), j.T, j.out);
}

int64_t rows_per_item(const QTensor& w, int64_t T, int threads) {
  const int64_t bytes = (int64_t(256) << 10) / std::clamp<int64_t>(T, 1, 4);
  const int64_t r = std::max<int64_t>(1, bytes / int64_t(std::max<size_t>(1, w.row_bytes())));
  int64_t n = (w.rows + r - 1) / r;  // items
  if (n < 8 * threads) n = (n + threads - 1) / threads * threads;
  return std::max<int64_t>(16, ((w.rows + n - 1) / n + 15) / 16 * 16);
}

void MatmulRunner::run(ThreadPool& pool, const Kernels& k, std::span<const MatmulJob> jobs) {
  items_.clear();
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (jobs[j].T == 0) continue;
    const QTensor& w = *jobs[j].w;
    const int64_t step = rows_per_item(w, jobs[j].T, pool.size());
    for (int64_t r = 0; r < w.rows; r += step)
      items_.push_back({int(j), r, std::min(w.rows, r + step)});
  }
  pool.run(items_.size(), [&](size_t i, int) {
    const Item& it = items_[i];
    matmul_rows(k, jobs[size_t(it.job)], it.r0, it.r1);
  });
}

}  // namespace tern::cpu
