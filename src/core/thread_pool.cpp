#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "core/denormals.h"
#include "core/env.h"
#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tern {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long an idle worker spins before it sleeps, and how many pauses a wait
// spins before it also yields the core (to a worker or process the OS runs
// there instead: on an idle machine a yield returns at once).
constexpr auto kSpin = std::chrono::microseconds(1000);
constexpr int kPausesBeforeYield = 2048;

// One step of a wait: a pause, or after a while a yield too.
inline void wait_step(int& spins) {
  cpu_relax();
  if (++spins > kPausesBeforeYield) std::this_thread::yield();
}

constexpr uint64_t kField = (uint64_t(1) << 24) - 1;
constexpr uint64_t pack(uint64_t generation, uint64_t n, uint64_t next) {
  return (generation & 0xffff) << 48 | (n & kField) << 24 | (next & kField);
}
constexpr uint64_t count_of(uint64_t t) {
  return (t >> 24) & kField;
}
constexpr uint64_t next_of(uint64_t t) {
  return t & kField;
}

// Whether this thread is running an item (of any pool): a run() from there
// runs its items inline, since the pool's one job slot is taken.
thread_local bool in_item = false;

struct InItem {
  InItem() { in_item = true; }
  ~InItem() { in_item = false; }
};

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  for (int i = 1; i < std::max(1, n_threads); ++i)
    workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  ticket_.fetch_add(uint64_t(1) << 48);  // a change every sleeper wakes for
  ticket_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const auto n = env_int(kThreadsEnv); n && *n > 0) return int(*n);
    return int(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

void ThreadPool::work(uint64_t t, int thread) {
  while (next_of(t) < count_of(t)) {
    if (ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acquire)) {
      call_(fn_, size_t(next_of(t)), thread);
      done_.fetch_add(1, std::memory_order_release);
      t = ticket_.load(std::memory_order_acquire);
    }
    // On failure t holds the current ticket: of this job, or of none to claim.
  }
}

void ThreadPool::run_erased(size_t n, Call call, const void* fn) {
  if (n == 0) return;
  const FlushDenormals ftz;  // the caller's items too (workers flush for good)
  if (n == 1 || workers_.empty() || in_item) {
    for (size_t i = 0; i < n; ++i) call(fn, i, 0);
    return;
  }
  const InItem inside;
  const std::lock_guard one_job(job_);  // callers on other threads take turns
  TERN_CHECK(n <= kField);
  call_ = call;
  fn_ = fn;
  done_.store(0, std::memory_order_relaxed);
  const uint64_t t = pack(++generation_, n, 0);
  // seq_cst here and in worker_loop: a worker that registers as a sleeper
  // either sees the new ticket or is seen and woken.
  ticket_.store(t);
  if (sleepers_.load() > 0) ticket_.notify_all();
  work(t, 0);
  for (int spins = 0; done_.load(std::memory_order_acquire) != n;) wait_step(spins);
}

void ThreadPool::worker_loop(int thread) {
  const FlushDenormals ftz;
  const InItem inside;  // a worker only ever runs items
  for (;;) {
    uint64_t t = ticket_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    work(t, thread);
    // Nothing left to claim: wait for the ticket to change. The ticket read
    // here may be the destructor's last change, so stop_ ends the wait too.
    t = ticket_.load(std::memory_order_acquire);
    if (next_of(t) < count_of(t)) continue;
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int spins = 0; ticket_.load(std::memory_order_acquire) == t && !stop_.load();) {
      wait_step(spins);
      if (spins % 1024 == 0 && std::chrono::steady_clock::now() > until) {
        sleepers_.fetch_add(1);
        ticket_.wait(t);  // re-checks the value after registering
        sleepers_.fetch_sub(1);
      }
    }
  }
}

}  // namespace tern
