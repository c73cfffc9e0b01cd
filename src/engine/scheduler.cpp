#include "engine/scheduler.h"

#include <spdlog/spdlog.h>

namespace tern {

Job::Job(Request r) : req_(std::move(r)) {
  if (!req_.cancelled) req_.cancelled = std::make_shared<std::atomic<bool>>(false);
}

void Job::push(Event e) {
  {
    std::lock_guard lock(m_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

void Job::mark_started() {
  std::lock_guard lock(m_);
  started_ = std::chrono::steady_clock::now();
}

std::optional<std::chrono::steady_clock::time_point> Job::started() const {
  std::lock_guard lock(m_);
  return started_;
}

std::optional<Job::Event> Job::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(m_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

Scheduler::Scheduler(Engine& engine, size_t max_queue)
    : engine_(engine), max_queue_(max_queue), thread_([this] { loop(); }) {}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
    for (auto& j : queue_) j->cancel();
    if (current_) current_->cancel();  // a stop must not wait for a prefill nobody reads
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Job> Scheduler::submit(Request r, EndHook on_end) {
  auto job = std::make_shared<Job>(std::move(r));
  job->on_end_ = std::move(on_end);
  {
    std::lock_guard lock(m_);
    if (stop_ || queue_.size() >= max_queue_) return nullptr;
    if (background_) background_->cancel();
    background_.reset();
    queue_.push_back(job);
  }
  cv_.notify_all();
  return job;
}

std::shared_ptr<Job> Scheduler::submit_background(Request r) {
  auto job = std::make_shared<Job>(std::move(r));
  {
    std::lock_guard lock(m_);
    if (stop_ || !queue_.empty()) return nullptr;
    if (background_) background_->cancel();  // superseded
    background_ = job;
    queue_.push_back(job);
  }
  cv_.notify_all();
  return job;
}

size_t Scheduler::waiting() const {
  std::lock_guard lock(m_);
  return queue_.size();
}

bool Scheduler::busy() const {
  std::lock_guard lock(m_);
  return running_;
}

void Scheduler::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      current_ = job;
    }
    job->mark_started();
    Job::Event end;
    try {
      end.result = engine_.run(job->request(), [&](Delta&& d) {
        Job::Event e;
        e.delta = std::move(d);
        job->push(std::move(e));
      });
    } catch (const std::exception& e) {
      spdlog::error("request {} failed: {}", job->request().id, e.what());
      end.error = e.what();
    }
    if (job->on_end_) job->on_end_(*job, end);
    job->push(std::move(end));
    std::lock_guard lock(m_);
    running_ = false;
    current_.reset();
    if (background_ == job) background_.reset();
  }
}

}  // namespace tern
