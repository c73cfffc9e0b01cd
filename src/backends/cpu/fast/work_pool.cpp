#include "backends/cpu/fast/work_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tern::cpu::fast {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long an idle worker spins before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(1000);

}  // namespace

WorkPool::WorkPool(int n_threads) {
  for (int i = 1; i < std::max(1, n_threads); ++i)
    workers_.emplace_back([this, i] { worker_loop(i); });
}

WorkPool::~WorkPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

WorkPool& WorkPool::global() {
  static WorkPool pool([] {
    if (const char* env = std::getenv("TERN_THREADS")) {
      const int n = std::atoi(env);
      if (n > 0) return n;
    }
    return int(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

void WorkPool::work(int thread) {
  for (;;) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_) return;
    call_(fn_, i, thread);
  }
}

void WorkPool::run_erased(size_t n, Call call, const void* fn) {
  if (n == 0) return;
  if (n == 1 || workers_.empty()) {
    for (size_t i = 0; i < n; ++i) call(fn, i, 0);
    return;
  }
  call_ = call;
  fn_ = fn;
  n_ = n;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(int(workers_.size()), std::memory_order_relaxed);
  // seq_cst on both sides (here and in worker_loop): a worker that registers as
  // a sleeper either sees the new generation or is seen and woken.
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) generation_.notify_all();
  work(0);
  while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
}

void WorkPool::worker_loop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      const auto until = std::chrono::steady_clock::now() + kSpin;
      for (int spins = 0; g == seen; ++spins) {
        cpu_relax();
        g = generation_.load(std::memory_order_acquire);
        if ((spins & 1023) == 1023 && std::chrono::steady_clock::now() > until) {
          sleepers_.fetch_add(1);
          // wait() re-checks the value after registering: a job published meanwhile is seen.
          generation_.wait(seen);
          sleepers_.fetch_sub(1);
          g = generation_.load(std::memory_order_acquire);
        }
      }
    }
    if (stop_.load()) return;
    seen = g;
    work(thread);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace tern::cpu::fast
