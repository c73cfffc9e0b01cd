// One request on the engine, advanced one backend call at a time: alone to
// its end (Engine::run) or beside others (Scheduler, continuous batching).
// Its calls are its own whichever way it runs (the prefill plan's calls, then
// decode steps), so its output is too: a decode step beside others computes
// each row as it would be alone (Backend::step).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "engine/logprobs.h"
#include "engine/output_stream.h"
#include "engine/prefill_plan.h"
#include "engine/request.h"
#include "engine/session_cache.h"

namespace tern {

class Engine;

class Stream {
 public:
  // Checks r (tern::Error on bad input: an empty or too long prompt, ids
  // outside the vocabulary, bad sampling parameters) and leases its session
  // from the cache. r and on_delta must outlive the stream.
  Stream(Engine& e, const Request& r, const std::function<void(Delta&&)>& on_delta);
  Stream(const Stream&) = delete;  // its hooks point at it
  Stream& operator=(const Stream&) = delete;

  enum class Phase { prefill, decode, done };
  Phase phase() const { return phase_; }

  // Prefill: the plan's next call; after the last one, the first delta (the
  // prompt is in) and the decode phase, or done (cancelled, no tokens wanted).
  void prefill();
  // Decode, alone: up to n tokens in one Backend::generate call.
  void generate(int n);
  // Decode beside others: this stream's row of a Backend::step, then its choice.
  StepRow row();
  void accept(int32_t token);
  // Done: the last output and the result; the session goes back to the cache.
  Result finish();

  const Request& request() const { return r_; }
  int64_t generated() const { return int64_t(generated_.size()); }

 private:
  using Clock = std::chrono::steady_clock;
  void begin_decode();
  // A chosen token's output; false when it ends the completion.
  bool on_token(int32_t t);
  void flush();

  Engine& e_;
  const Request& r_;
  const std::function<void(Delta&&)>& on_delta_;
  Clock::time_point t0_, last_;
  Result res_;
  PrefillPlan plan_;
  size_t next_stop_ = 0;
  Session s_;
  std::optional<OutputStream> out_;
  Delta pending_;
  std::optional<LogprobRow> logprobs_;
  GenerateHooks hooks_;
  std::vector<int32_t> generated_;
  int remaining_ = 0;  // tokens the completion may still choose
  int32_t next_ = 0;   // the token the next decode call feeds
  Phase phase_ = Phase::prefill;
};

}  // namespace tern
