// The engine thread and its bounded FIFO queue: HTTP (or other) threads
// submit requests and read each one's output from its Job as it streams; the
// one thread that owns the backend runs them in order, batch 1.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "engine/engine.h"

namespace tern {

// One submitted request: its output queue and its end, filled by the engine
// thread, read by the submitter.
class Job {
 public:
  explicit Job(Request r);
  const Request& request() const { return req_; }
  // Stops the request: before it starts, or within a decode step or prefill call.
  void cancel() { req_.cancelled->store(true); }

  // The next output, waiting up to `timeout`: a delta, or the end (result or
  // error). nullopt on timeout.
  struct Event {
    std::optional<Delta> delta;
    std::optional<Result> result;  // the end, on success
    std::string error;             // the end, on failure (the exception's message)
  };
  std::optional<Event> next(std::chrono::milliseconds timeout);
  // When the engine thread took it up (queue time ends).
  std::optional<std::chrono::steady_clock::time_point> started() const;

 private:
  friend class Scheduler;
  void push(Event e);
  std::function<void(const Job&, const Event&)> on_end_;
  void mark_started();

  Request req_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  std::optional<std::chrono::steady_clock::time_point> started_;
};

class Scheduler {
 public:
  Scheduler(Engine& engine, size_t max_queue);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues r; nullptr when max_queue requests are already waiting. on_end
  // runs on the engine thread when it ends, read by the submitter or not.
  using EndHook = std::function<void(const Job&, const Job::Event&)>;
  std::shared_ptr<Job> submit(Request r, EndHook on_end = {});
  // Queues work nobody waits for (prefilling a likely next turn), only when no
  // request is waiting; a later submit() cancels it, queued or running, so a
  // request waits for it at most until the engine's next check (a prefill
  // call). nullptr when it was not queued.
  std::shared_ptr<Job> submit_background(Request r);
  size_t waiting() const;  // queued, not yet started
  bool busy() const;       // a request is running
  Engine& engine() { return engine_; }

 private:
  void loop();

  Engine& engine_;
  size_t max_queue_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> background_;  // the latest background job, queued or running
  std::shared_ptr<Job> current_;     // the running job
  bool running_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace tern
