// The fast CPU backend's thread pool: workers spin on an atomic generation
// counter between jobs (decode runs ~10 parallel regions per layer, ~0.1 ms
// apart, and a condition-variable wake-up costs tens of microseconds in a VM),
// and sleep on it (C++20 atomic wait) after ~1 ms without work. Items of a job
// are taken one at a time from an atomic counter, so unequal items balance.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace tern::cpu::fast {

class WorkPool {
 public:
  explicit WorkPool(int n_threads);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Calls fn(item, thread) for every item in [0, n), thread in [0, size()),
  // and returns when all are done. The calling thread works as thread 0.
  template <class F>
  void run(size_t n, const F& fn) {
    run_erased(
        n, [](const void* f, size_t i, int t) { (*static_cast<const F*>(f))(i, t); }, &fn);
  }

  // The process-wide pool: TERN_THREADS threads, or one per hardware thread.
  static WorkPool& global();

 private:
  using Call = void (*)(const void*, size_t, int);
  void run_erased(size_t n, Call call, const void* fn);
  void work(int thread);
  void worker_loop(int thread);

  std::vector<std::thread> workers_;
  Call call_ = nullptr;
  const void* fn_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace tern::cpu::fast
