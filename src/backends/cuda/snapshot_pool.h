// Snapshot blocks for CudaBackend::save, all of one size (every GDN layer's
// state and conv state), kept for reuse: a turn saves two or three snapshots,
// and 60 cudaMallocs and cudaFrees a snapshot (each free synchronises the
// device) took milliseconds. Shared by the backend and its snapshots, which
// may outlive it; a block is only used on the backend's stream, so one given
// back is safe to hand out again in stream order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <mutex>
#include <vector>

#include "backends/cuda/check.h"

namespace tern::cuda {

struct SnapshotPool {
  static constexpr size_t kKeep = 4;  // free blocks held at most
  std::mutex m;
  std::vector<void*> free;
  ~SnapshotPool() {
    for (void* p : free) cudaFree(p);
  }
  void* take(size_t bytes) {
    {
      std::lock_guard lock(m);
      if (!free.empty()) {
        void* p = free.back();
        free.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "snapshot");
    return p;
  }
  void give(void* p) {
    std::lock_guard lock(m);
    if (free.size() < kKeep)
      free.push_back(p);
    else
      cudaFree(p);
  }
};

}  // namespace tern::cuda
