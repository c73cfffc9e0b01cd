// What every layer of the fast backend runs on: the pool, the kernel table, the
// matmul runner (whose item list is reused from call to call) and whether
// activations are quantised to int8 (false: every matmul in fp32, the
// reference's arithmetic in the fast backend's structure, for tests).
#pragma once

#include <span>

#include "backends/cpu/kernels.h"
#include "backends/cpu/linear.h"
#include "core/thread_pool.h"
#include "model/attention.h"
#include "model/gdn.h"

namespace tern::cpu {

struct Context {
  ThreadPool& pool;
  const Kernels& k;
  bool int8;
  MatmulRunner mm;
};

// Rows [t0, t0 + n) of a layer's input: tokens of one sequence, the first at
// position pos0, and that sequence's state of the layer (its type's). A
// prefill chunk is one such run of rows; a decode step over several sequences
// is one a sequence, each computed as it would be alone.
struct SeqRows {
  int64_t t0, n, pos0;
  model::GdnState* gdn;
  model::KvCache* kv;
};

// A scratch buffer per pool thread: reserve() before a pool run (it may
// allocate), at() inside it.
class PerThread {
 public:
  void reserve(int threads, size_t n) {
    if (bufs_.size() < size_t(threads)) bufs_.resize(size_t(threads));
    for (auto& b : bufs_) grow(b, n);
  }
  float* at(int thread) { return bufs_[size_t(thread)].data(); }

 private:
  std::vector<std::vector<float>> bufs_;
};

}  // namespace tern::cpu
