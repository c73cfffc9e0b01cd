// The process's one thread pool (the CPU backends, the quantiser, the
// checkpoint writer): workers spin on an atomic ticket between
// jobs (decode runs ~10 parallel regions per layer, ~0.1 ms apart, and a
// condition-variable wake-up costs tens of microseconds in a VM), and sleep on
// it (C++20 atomic wait) after ~1 ms without work. Items are claimed one at a
// time from the ticket, so unequal items balance, and a job needs no worker to
// show up: the caller claims items too and waits only for the items claimed,
// so a worker the OS has descheduled (another process on the core) costs the
// job nothing unless it holds an item; waits that last yield the core.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace tern {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Calls fn(item, thread) for every item in [0, n), thread in [0, size()),
  // and returns when all are done. The calling thread works as thread 0; a
  // call from inside an item runs its items there, one after another. Items
  // run with denormals flushed to zero (denormals.h).
  template <class F>
  void run(size_t n, const F& fn) {
    run_erased(
        n, [](const void* f, size_t i, int t) { (*static_cast<const F*>(f))(i, t); }, &fn);
  }

  // Calls fn(begin, end, thread) over [0, n) in contiguous blocks of at least
  // `grain` items (at most four blocks per thread).
  template <class F>
  void parallel_for(size_t n, size_t grain, const F& fn) {
    if (n == 0) return;
    grain = std::max<size_t>(grain, 1);
    const size_t blocks = std::min((n + grain - 1) / grain, size_t(size()) * 4);
    const size_t per = (n + blocks - 1) / blocks;
    run(blocks, [&](size_t b, int t) {
      if (b * per < n) fn(b * per, std::min(n, (b + 1) * per), t);
    });
  }

  // The process-wide pool: TERN_THREADS threads, or one per hardware thread.
  static ThreadPool& global();

 private:
  using Call = void (*)(const void*, size_t, int);
  void run_erased(size_t n, Call call, const void* fn);
  // Claims and runs items of the job in `ticket` while there are any.
  void work(uint64_t ticket, int thread);
  void worker_loop(int thread);

  // The ticket packs the job's generation (16 bits), its item count and the
  // next unclaimed item (24 bits each), so one compare-exchange claims an item
  // of exactly the job it read.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<size_t> done_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex job_;
  Call call_ = nullptr;
  const void* fn_ = nullptr;
  uint64_t generation_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace tern
