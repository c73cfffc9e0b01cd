// The engine thread and its bounded FIFO queue: HTTP (or other) threads
// submit requests and read each one's output from its Job as it streams; the
// one thread that owns the backend runs up to `parallel` of them at once
// (continuous batching): requests join and leave between steps, each loop
// runs one prefill call of the oldest request still prefilling, then one
// decode step of every request decoding (a lone one decodes a few tokens a
// call). A request's calls are its own either way (engine/stream.h), so its
// output does not depend on the others.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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
  bool background_ = false;  // submit_background's work, cancelled or not
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  std::optional<std::chrono::steady_clock::time_point> started_;
};

// What the loop did, for /metrics.
struct SchedulerStats {
  // steps[r]: decode steps of r requests together (r ≥ 1; index 0 unused).
  std::vector<uint64_t> steps;
  // Seconds requests in their decode phase waited for other requests'
  // prefill calls (a call's time once for each of them).
  double prefill_stall_seconds = 0;
};

class Scheduler {
 public:
  // parallel: requests run at once (at least 1). seq_budget: what running
  // requests' sequences may hold together (Engine::sequence_need; 0: no
  // bound); the queue's next request waits until it fits beside those
  // running (alone, it runs).
  Scheduler(Engine& engine, size_t max_queue, int parallel = 1, size_t seq_budget = 0);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues r; nullptr when max_queue requests are already waiting. on_end
  // runs on the engine thread when it ends, read by the submitter or not.
  using EndHook = std::function<void(const Job&, const Job::Event&)>;
  std::shared_ptr<Job> submit(Request r, EndHook on_end = {});
  // Queues work nobody waits for (prefilling a likely next turn), only when no
  // request is waiting; a later submit() cancels it, queued or running, so a
  // request waits for it at most until its next check (a prefill call). While
  // it runs, its prefill calls come only when no other request runs. nullptr
  // when it was not queued.
  std::shared_ptr<Job> submit_background(Request r);
  size_t waiting() const;  // queued, not yet started
  size_t running() const;  // started, not yet ended
  // What the running requests' sequences may hold (their needs' sum).
  size_t held() const;
  bool busy() const { return running() > 0; }
  int parallel() const { return parallel_; }
  SchedulerStats stats() const;
  Engine& engine() { return engine_; }

 private:
  struct Active {
    std::shared_ptr<Job> job;
    std::function<void(Delta&&)> on_delta;  // before stream: it refers to this
    std::unique_ptr<Stream> stream;
    size_t need = 0;  // Engine::sequence_need
  };
  void loop();
  // Takes up to `parallel` jobs from the queue; false when stopping with none.
  bool admit(std::vector<std::unique_ptr<Active>>& active);
  void start(Active& a);  // its stream (an error ends the job)
  // One loop: a prefill call, a decode step, the ends.
  void advance(std::vector<std::unique_ptr<Active>>& active);
  void fail(Active& a, const std::exception& e);  // ends the job with the error
  void end(Active& a, Job::Event e);

  Engine& engine_;
  size_t max_queue_;
  int parallel_;
  size_t seq_budget_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> background_;            // the latest background job, queued or running
  std::vector<std::shared_ptr<Job>> running_;  // started jobs (the engine thread's streams)
  SchedulerStats stats_;
  size_t held_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tern
