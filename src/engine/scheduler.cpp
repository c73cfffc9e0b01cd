#include "engine/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

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

Scheduler::Scheduler(Engine& engine, size_t max_queue, int parallel, size_t seq_budget)
    : engine_(engine),
      max_queue_(max_queue),
      parallel_(std::max(1, parallel)),
      seq_budget_(seq_budget) {
  stats_.steps.assign(size_t(parallel_) + 1, 0);
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
    for (auto& j : queue_) j->cancel();
    for (auto& j : running_) j->cancel();  // a stop must not wait for a prefill nobody reads
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
  job->background_ = true;
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

size_t Scheduler::running() const {
  std::lock_guard lock(m_);
  return running_.size();
}

size_t Scheduler::held() const {
  std::lock_guard lock(m_);
  return held_;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(m_);
  return stats_;
}

void Scheduler::loop() {
  std::vector<std::unique_ptr<Active>> active;
  while (admit(active)) advance(active);
}

bool Scheduler::admit(std::vector<std::unique_ptr<Active>>& active) {
  std::vector<std::unique_ptr<Active>> taken;
  {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !active.empty(); });
    if (queue_.empty() && active.empty()) return false;  // stopping, nothing left
    // Background work holds the session it extends (acquired, out of the
    // cache) until it ends; a request admitted beside it would miss that
    // session. A request cancels it, so it ends at its next prefill stop.
    const bool background_held = std::any_of(active.begin(), active.end(),
                                             [](const auto& a) { return a->job->background_; });
    while (!background_held && active.size() + taken.size() < size_t(parallel_) &&
           !queue_.empty()) {
      const size_t need = engine_.sequence_need(queue_.front()->request());
      if (seq_budget_ > 0 && held_ + need > seq_budget_ && !running_.empty()) break;
      auto a = std::make_unique<Active>();
      a->need = need;
      held_ += need;
      a->job = std::move(queue_.front());
      queue_.pop_front();
      running_.push_back(a->job);
      taken.push_back(std::move(a));
      if (taken.back()->job->background_) break;  // it too holds its session
    }
  }
  for (auto& a : taken) {
    start(*a);
    if (a->stream) active.push_back(std::move(a));
  }
  return true;
}

void Scheduler::start(Active& a) {
  a.job->mark_started();
  Job& job = *a.job;
  a.on_delta = [&job](Delta&& d) {
    Job::Event e;
    e.delta = std::move(d);
    job.push(std::move(e));
  };
  try {
    a.stream = std::make_unique<Stream>(engine_, job.request(), a.on_delta);
  } catch (const std::exception& e) {
    fail(a, e);
  }
}

void Scheduler::advance(std::vector<std::unique_ptr<Active>>& active) {
  using Clock = std::chrono::steady_clock;
  auto in = [](const Active& a, Stream::Phase p) { return a.stream && a.stream->phase() == p; };
  // One prefill call: the oldest request still prefilling; background work
  // only when no request runs, unless cancelled (its call then just ends it).
  const bool requests = std::any_of(active.begin(), active.end(), [](const auto& a) {
    return a->stream && !a->job->background_;
  });
  const auto pre = std::find_if(active.begin(), active.end(), [&](const auto& a) {
    return in(*a, Stream::Phase::prefill) &&
           (!a->job->background_ || !requests || a->job->request().cancelled->load());
  });
  std::vector<Active*> decoding;
  for (auto& a : active)
    if (in(*a, Stream::Phase::decode)) decoding.push_back(a.get());
  if (pre != active.end()) {
    const auto t0 = Clock::now();
    try {
      (*pre)->stream->prefill();
    } catch (const std::exception& e) {
      fail(**pre, e);
    }
    std::lock_guard lock(m_);
    stats_.prefill_stall_seconds +=
        std::chrono::duration<double>(Clock::now() - t0).count() * double(decoding.size());
  }
  // One decode step of every request decoding; alone, a few.
  if (!decoding.empty()) {
    try {
      if (active.size() == 1) {
        Stream& s = *decoding[0]->stream;
        const int64_t before = s.generated();
        s.generate(engine_.backend().generate_slice());
        std::lock_guard lock(m_);
        stats_.steps[1] += uint64_t(s.generated() - before);
      } else {
        std::vector<Stream*> streams;
        for (Active* a : decoding) streams.push_back(a->stream.get());
        engine_.step(streams);
        std::lock_guard lock(m_);
        stats_.steps[streams.size()]++;
      }
    } catch (const std::exception& e) {
      for (Active* a : decoding) fail(*a, e);
    }
  }
  for (auto& a : active) {
    if (!in(*a, Stream::Phase::done)) continue;
    Job::Event ev;
    try {
      ev.result = a->stream->finish();
    } catch (const std::exception& e) {
      fail(*a, e);
      continue;
    }
    a->stream.reset();
    end(*a, std::move(ev));
  }
  std::erase_if(active, [](const auto& a) { return !a->stream; });
}

void Scheduler::fail(Active& a, const std::exception& e) {
  spdlog::error("request {} failed: {}", a.job->request().id, e.what());
  a.stream.reset();  // its session is dropped, not cached
  Job::Event ev;
  ev.error = e.what();
  end(a, std::move(ev));
}

void Scheduler::end(Active& a, Job::Event e) {
  if (a.job->on_end_) a.job->on_end_(*a.job, e);
  a.job->push(std::move(e));
  std::lock_guard lock(m_);
  std::erase(running_, a.job);
  held_ -= std::exchange(a.need, 0);
  if (background_ == a.job) background_.reset();
}

}  // namespace tern
