// A fixed pool of worker threads with one operation: run a function over an
// index range split into contiguous blocks, and wait for all of them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
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

  // Calls fn(begin, end, thread_index) over [0, n) in blocks of at least `grain`.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t, int)>& fn);

  // The process-wide pool (size from TERN_THREADS or the hardware).
  static ThreadPool& global();

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(size_t, size_t, int)>* job_ = nullptr;
  size_t n_ = 0, block_ = 0, n_blocks_ = 0, next_block_ = 0;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace tern
