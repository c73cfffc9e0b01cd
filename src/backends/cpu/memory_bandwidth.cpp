#include "backends/cpu/memory_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

namespace tern::cpu {

namespace {

constexpr size_t kBytes = size_t(128) << 20;
constexpr size_t kSlice = size_t(1) << 20;  // work item

double seconds(const auto& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

MemoryBandwidth measure_memory_bandwidth(ThreadPool& pool) {
  std::unique_ptr<uint64_t[]> a(new uint64_t[kBytes / 8]), b(new uint64_t[kBytes / 8]);
  const size_t n = kBytes / kSlice, words = kSlice / 8;
  pool.run(n, [&](size_t i, int) {
    for (size_t j = 0; j < words; ++j) a[i * words + j] = b[i * words + j] = i + j;
  });
  std::vector<uint64_t> sums(size_t(pool.size()) * 8);  // a cache line per thread
  auto copy = [&] {
    pool.run(n, [&](size_t i, int) { std::memcpy(&b[i * words], &a[i * words], kSlice); });
  };
  auto read = [&] {
    pool.run(n, [&](size_t i, int t) {
      uint64_t s[8] = {};
      const uint64_t* p = &a[i * words];
      for (size_t j = 0; j < words; j += 8)
        for (int l = 0; l < 8; ++l) s[l] += p[j + l];
      for (int l = 0; l < 8; ++l) sums[size_t(t) * 8] += s[l];
    });
  };
  for (int i = 0; i < 3; ++i) {
    copy();
    read();
  }
  double tc = 1e30, tr = 1e30;
  for (int i = 0; i < 5; ++i) {
    tc = std::min(tc, seconds(copy));
    tr = std::min(tr, seconds(read));
  }
  volatile uint64_t keep = sums[0];
  (void)keep;
  return {2.0 * double(kBytes) / tc, double(kBytes) / tr};
}

}  // namespace tern::cpu
