#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace tern {

ThreadPool::ThreadPool(int n_threads) {
  for (int i = 1; i < std::max(1, n_threads); ++i)
    workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("TERN_THREADS")) {
      int n = std::atoi(env);
      if (n > 0) return n;
    }
    return int(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

void ThreadPool::parallel_for(size_t n, size_t grain,
                              const std::function<void(size_t, size_t, int)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  size_t max_blocks = (n + grain - 1) / grain;
  size_t n_blocks = std::min<size_t>(max_blocks, size_t(size()) * 4);
  if (n_blocks <= 1 || workers_.empty()) {
    fn(0, n, 0);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  n_ = n;
  n_blocks_ = n_blocks;
  block_ = (n + n_blocks - 1) / n_blocks;
  next_block_ = 0;
  pending_ = int(workers_.size());
  ++generation_;
  lock.unlock();
  cv_start_.notify_all();
  // The calling thread works too, as thread 0.
  for (;;) {
    lock.lock();
    size_t b = next_block_ < n_blocks_ ? next_block_++ : n_blocks_;
    lock.unlock();
    if (b >= n_blocks_) break;
    fn(b * block_, std::min(n, (b + 1) * block_), 0);
  }
  lock.lock();
  cv_done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_start_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    for (;;) {
      size_t b = next_block_ < n_blocks_ ? next_block_++ : n_blocks_;
      if (b >= n_blocks_) break;
      lock.unlock();
      (*job_)(b * block_, std::min(n_, (b + 1) * block_), index);
      lock.lock();
    }
    if (--pending_ == 0) cv_done_.notify_all();
  }
}

}  // namespace tern
