// Host-side state of the CUDA kernels' launchers: the device's SM count
// (queried once; a failed query is an error, not a silent 0), the split
// policy of launches too small to fill it, and the path
// counters (host_state.h's KernelPath), touched once per launch.
#include <algorithm>
#include <array>
#include <atomic>

#include "backends/cuda/check.h"
#include "backends/cuda/host_state.h"

namespace tern::cuda {

int sm_count() {
  static const int sms = [] {
    int dev = 0, n = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), "SM count");
    if (n <= 0) fail("CUDA device {} reports {} SMs", dev, n);
    return n;
  }();
  return sms;
}

int fill_splits(int blocks, int most) {
  const int sms = sm_count();
  if (blocks >= sms) return 1;
  return std::max(1, std::min((2 * sms + blocks - 1) / std::max(1, blocks), most));
}

namespace {
std::array<std::atomic<long>, size_t(KernelPath::count)> g_paths;
}

void note_path(KernelPath p) {
  g_paths[size_t(p)].fetch_add(1, std::memory_order_relaxed);
}

std::vector<long> path_counts() {
  std::vector<long> out;
  for (const auto& n : g_paths) out.push_back(n.load(std::memory_order_relaxed));
  return out;
}

void reset_path_counts() {
  for (auto& n : g_paths) n.store(0, std::memory_order_relaxed);
}

}  // namespace tern::cuda
