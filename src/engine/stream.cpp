#include "engine/stream.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "engine/engine.h"

namespace tern {

namespace {

bool cancelled(const Request& r) {
  return r.cancelled && r.cancelled->load(std::memory_order_relaxed);
}

}  // namespace

Stream::Stream(Engine& e, const Request& r, const std::function<void(Delta&&)>& on_delta)
    : e_(e), r_(r), on_delta_(on_delta), t0_(Clock::now()), last_(t0_) {
  const int64_t n = int64_t(r.prompt.size());
  if (n == 0) fail("the prompt is empty");
  if (n >= e.ctx_) fail("the prompt has {} tokens; the context holds {}", n, e.ctx_);
  e.be_.check_ids(r.prompt);
  validate(r.sampling);
  res_.prompt_tokens = n;
  plan_ = plan_prefill(r.prompt, e.policy_);
  s_ = e.cache_.acquire(r.prompt, plan_);
  res_.cached_tokens = int64_t(s_.tokens.size());
  res_.disk_tokens = s_.loaded;
  res_.cache_left_at = s_.matched;
  s_.generation_start = plan_.generation_start;
}

void Stream::prefill() {
  const int64_t at = int64_t(s_.tokens.size());
  while (next_stop_ < plan_.stops.size() && plan_.stops[next_stop_].at <= at) ++next_stop_;
  if (next_stop_ < plan_.stops.size() && !cancelled(r_)) {
    const PrefillStop& stop = plan_.stops[next_stop_++];
    const auto part = std::span(r_.prompt).subspan(size_t(at), size_t(stop.at - at));
    std::vector<float> none;
    e_.be_.forward(*s_.seq, part, Logits::none, none);
    s_.tokens.insert(s_.tokens.end(), part.begin(), part.end());
    if (stop.snapshot) e_.cache_.snapshot(s_);
    if (next_stop_ < plan_.stops.size()) return;
  }
  begin_decode();
}

void Stream::begin_decode() {
  res_.prefill_s = std::chrono::duration<double>(Clock::now() - t0_).count();
  phase_ = Phase::done;
  if (cancelled(r_)) {
    res_.finish = Finish::cancelled;
    return;
  }
  out_.emplace(e_.tok_, r_);
  pending_.cached_tokens = res_.cached_tokens;
  on_delta_(std::exchange(pending_, Delta{}));  // the prompt is in
  hooks_.constraint = r_.constraint.get();
  if (r_.logprobs >= 0)
    hooks_.on_logits = [this](std::span<const float> l) { logprobs_.emplace(l, r_.logprobs); };
  res_.finish = Finish::length;
  remaining_ = int(std::min<int64_t>(r_.max_tokens, e_.ctx_ - res_.prompt_tokens));
  next_ = r_.prompt.back();
  if (remaining_ > 0) {
    e_.be_.start_sampling(*s_.seq, r_.sampling, r_.prompt);
    phase_ = Phase::decode;
  }
}

void Stream::flush() {
  if (!pending_.empty()) on_delta_(std::exchange(pending_, Delta{}));
}

bool Stream::on_token(int32_t t) {
  const auto now = Clock::now();
  if (generated_.empty())
    res_.ttft_s = std::chrono::duration<double>(now - t0_).count();
  else
    res_.token_gaps.push_back(float(std::chrono::duration<double>(now - last_).count()));
  last_ = now;
  generated_.push_back(t);
  --remaining_;
  if (logprobs_) pending_.logprobs.push_back(logprobs_->of(t));
  if (e_.is_end_token(t) && !r_.ignore_eos) {
    res_.finish = Finish::stop;
    return false;
  }
  out_->push(t, pending_);
  res_.tool_calls += int(pending_.chat.tool_calls.size());
  flush();
  if (out_->stopped()) {
    res_.finish = Finish::stop, res_.stop_string = true;
    res_.stop_sequence = out_->stop_sequence();
    return false;
  }
  if (r_.constraint && r_.constraint->done()) {  // the grammar's text is whole
    res_.finish = Finish::stop;
    return false;
  }
  if (cancelled(r_)) {
    res_.finish = Finish::cancelled;
    return false;
  }
  return true;
}

void Stream::generate(int n) {
  TERN_CHECK(phase_ == Phase::decode);
  bool more = true;
  e_.be_.generate(
      *s_.seq, next_, std::min(n, remaining_),
      [&](int32_t t) {
        next_ = t;
        return more = on_token(t);
      },
      hooks_);
  if (!more || remaining_ == 0) phase_ = Phase::done;
}

StepRow Stream::row() {
  TERN_CHECK(phase_ == Phase::decode);
  return {s_.seq.get(), next_, &hooks_};
}

void Stream::accept(int32_t token) {
  next_ = token;
  if (!on_token(token) || remaining_ == 0) phase_ = Phase::done;
}

Result Stream::finish() {
  if (out_) {
    out_->finish(pending_);
    res_.tool_calls += int(pending_.chat.tool_calls.size());
    flush();
    if (res_.finish == Finish::stop && !res_.stop_string && res_.tool_calls > 0)
      res_.finish = Finish::tool_calls;
    res_.completion_tokens = int64_t(generated_.size());
    res_.decode_s = std::chrono::duration<double>(last_ - t0_).count() - res_.ttft_s;
  }
  // The session holds the prefilled prompt and what decoding fed: the last
  // prompt token, then the completion but its last token (generate() feeds
  // that one too when on_token ended the call).
  const int64_t fed = s_.seq->length() - int64_t(s_.tokens.size());
  TERN_CHECK(fed >= 0 && fed <= int64_t(generated_.size()) + 1);
  if (fed > 0) {
    s_.tokens.push_back(r_.prompt.back());
    s_.tokens.insert(s_.tokens.end(), generated_.begin(), generated_.begin() + (fed - 1));
  }
  TERN_CHECK(int64_t(s_.tokens.size()) == s_.seq->length());
  e_.cache_.release(std::move(s_));
  phase_ = Phase::done;
  return res_;
}

}  // namespace tern
