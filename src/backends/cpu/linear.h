// Matmuls of the fast backend over the work pool: input rows quantised once
// for every 4-bit matrix that reads them, and several matrices' rows (the
// four GDN in-projections, q/k/v) split into blocks of one pool run.
#pragma once

#include <span>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/thread_pool.h"

namespace tern::cpu {

// Grows v to at least n elements (never shrinks: buffers are reused).
template <class T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// T input rows of `cols` floats and, unless the fp32 path is asked for, their
// int8 quantisation (then 4-bit matrices take the integer kernel).
class Activations {
 public:
  // Quantises rows x + t * ld (t < T) on the pool when int8; x must outlive the use.
  void set(ThreadPool& pool, const Kernels& k, const float* x, int64_t ld, int64_t T, int64_t cols,
           bool int8);
  bool quantized() const { return quantized_; }
  QRows q(const int32_t* index = nullptr) const {
    return {q_.data(), d_.data(), s_.data(), cols_, index};
  }
  FRows f(const int32_t* index = nullptr) const { return {x_, ld_, index}; }
  int64_t cols() const { return cols_; }

 private:
  const float* x_ = nullptr;
  int64_t ld_ = 0, cols_ = 0;
  bool quantized_ = false;
  std::vector<int8_t> q_;
  std::vector<float> d_, s_;
};

// y = x W^T for the rows `index` (null: 0..T-1) of `in`.
struct MatmulJob {
  const QTensor* w;
  const Activations* in;
  const int32_t* index;
  int64_t T;
  OutRows out;
};

// Rows [r0, r1) of one job, by the kernel its weight format takes.
void matmul_rows(const Kernels& k, const MatmulJob& j, int64_t r0, int64_t r1);

// Rows per work item for a matrix multiplied by T tokens, a multiple of 16:
// ~256 KB of weights for one token, down to ~64 KB from 4 tokens on. Decode
// streams each item's weights once, and longer stretches keep the hardware
// prefetcher running (decode at 512 on the Zen 5 VM, four alternating pairs:
// 14.8-20.2 against 8.6-17.3 tok/s at 64 KB); a prompt's items cost T times
// more each, so smaller ones balance the threads (a 512-token prompt at 256 KB:
// -7% and -37%). bench/results/cpu-item-size-ab-d1aa293-zen5.txt
// The rows are then split evenly, and where that gives few items, into a
// multiple of `threads` of them (3 items on 2 threads leave one idle a third
// of the time).
int64_t rows_per_item(const QTensor& w, int64_t T, int threads);

class MatmulRunner {
 public:
  // All jobs' rows in one pool run.
  void run(ThreadPool& pool, const Kernels& k, std::span<const MatmulJob> jobs);

 private:
  struct Item {
    int job;
    int64_t r0, r1;
  };
  std::vector<Item> items_;
};

}  // namespace tern::cpu
