#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/error.h"
#include "core/hash.h"
#include "engine/stop_matcher.h"
#include "tokenizer/detokenizer.h"

namespace tern {

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::stop:
      return "stop";
    case Finish::length:
      return "length";
    case Finish::tool_calls:
      return "tool_calls";
    case Finish::cancelled:
      return "cancelled";
  }
  return "stop";
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Generated text on its way out: UTF-8-safe pieces, then (chat) the
// reasoning / content / tool-call split, then the stop strings on content.
class OutputStream {
 public:
  OutputStream(const Tokenizer* tok, const Request& r)
      : parser_(r.in_reasoning, r.tools, r.tool_calls),
        stops_(r.stop),
        chat_(r.output == Request::Output::chat) {
    if (tok) decoder_.emplace(*tok);
  }
  void push(int32_t id, Delta& d) { route(decoder_ ? decoder_->push(id) : std::string(), d); }
  bool stopped() const { return stops_.stopped(); }
  const std::string& stop_sequence() const { return stops_.matched(); }
  // End of generation: what the decoder, parser and stop matcher held.
  void finish(Delta& d) {
    if (decoder_) route(decoder_->finish(), d);
    if (stops_.stopped()) return;
    if (chat_) {
      ParsedDelta rest = parser_.finish();
      rest.content = stops_.push(rest.content);
      d.chat.append(std::move(rest));
      if (!stops_.stopped()) d.chat.content += stops_.finish();
    } else {
      d.text += stops_.finish();
    }
  }

 private:
  void route(const std::string& text, Delta& d) {
    if (text.empty() || stops_.stopped()) return;
    if (!chat_) {
      d.text += stops_.push(text);
      return;
    }
    ParsedDelta p = parser_.push(text);
    p.content = stops_.push(p.content);
    d.chat.append(std::move(p));
  }

  std::optional<StreamDecoder> decoder_;
  OutputParser parser_;
  StopMatcher stops_;
  bool chat_;
};

bool cancelled(const Request& r) {
  return r.cancelled && r.cancelled->load(std::memory_order_relaxed);
}

}  // namespace

namespace {

PrefillPolicy make_policy(const Backend& be, const Tokenizer* tok, const EngineOptions& o) {
  PrefillPolicy p;
  p.snapshot_every = o.snapshot_every;
  p.chunk = o.chunk > 0 ? o.chunk : be.prefill_chunk();
  if (tok) {
    p.message_start = tok->token_id("<|im_start|>");
    p.user_role = tok->token_id("user");
  }
  return p;
}

// What a disk entry's bits depend on beyond its tokens: the weights, the
// backend's arithmetic, where prefill stops (the calls that computed it) and
// the build (its kernels).
std::string binding(const Backend& be, const PrefillPolicy& p, const EngineOptions& o) {
  return fmt::format(
      "tern disk cache {}; model {}; numerics {}; plan every={} chunk={} start={} user={}; "
      "build {}",
      kCacheFormatVersion, o.model_id, be.numerics_id(), p.snapshot_every, p.chunk,
      p.message_start.value_or(-1), p.user_role.value_or(-1), hex64(executable_hash()));
}

// A directory another process uses leaves this one to memory (two chats on
// the default directory); any other problem with it is an error.
std::unique_ptr<DiskCache> make_disk(Backend& be, const PrefillPolicy& p, const EngineOptions& o) {
  if (o.cache_dir.empty()) return nullptr;
  try {
    return std::make_unique<DiskCache>(
        be,
        DiskCacheOptions{.dir = o.cache_dir, .budget = o.cache_disk, .binding = binding(be, p, o)});
  } catch (const CacheDirBusy& e) {
    spdlog::warn("{}: keeping sessions in memory only", e.what());
    return nullptr;
  }
}

}  // namespace

Engine::Engine(Backend& be, const Tokenizer* tok, const EngineOptions& o)
    : be_(be),
      tok_(tok),
      policy_(make_policy(be, tok, o)),
      disk_(make_disk(be, policy_, o)),
      cache_(be, o.cache_bytes, disk_.get()) {
  const ModelConfig& c = be.config();
  ctx_ = o.ctx_size > 0 ? std::min<int64_t>(o.ctx_size, c.max_positions) : c.max_positions;
  end_ids_.assign(c.eos_ids.begin(), c.eos_ids.end());
  if (tok)
    for (const char* t : {"<|im_end|>", "<|endoftext|>"})
      if (auto id = tok->token_id(t)) end_ids_.push_back(*id);
}

bool Engine::is_end_token(int32_t id) const {
  return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end();
}

Result Engine::run(const Request& r, const std::function<void(Delta&&)>& on_delta) {
  const auto t0 = Clock::now();
  const int64_t n = int64_t(r.prompt.size());
  if (n == 0) fail("the prompt is empty");
  if (n >= ctx_) fail("the prompt has {} tokens; the context holds {}", n, ctx_);
  be_.check_ids(r.prompt);
  validate(r.sampling);

  Result res;
  res.prompt_tokens = n;
  const PrefillPlan plan = plan_prefill(r.prompt, policy_);
  Session s = cache_.acquire(r.prompt, plan);
  res.cached_tokens = int64_t(s.tokens.size());
  res.disk_tokens = s.loaded;
  res.cache_left_at = s.matched;
  s.generation_start = plan.generation_start;
  std::vector<float> none;
  for (const PrefillStop& stop : plan.stops) {
    const int64_t at = int64_t(s.tokens.size());
    if (stop.at <= at) continue;
    if (cancelled(r)) break;
    const auto part = std::span(r.prompt).subspan(size_t(at), size_t(stop.at - at));
    be_.forward(*s.seq, part, Logits::none, none);
    s.tokens.insert(s.tokens.end(), part.begin(), part.end());
    if (stop.snapshot) cache_.snapshot(s);
  }
  res.prefill_s = since(t0);
  if (cancelled(r)) {
    res.finish = Finish::cancelled;
    cache_.release(std::move(s));
    return res;
  }

  OutputStream out(tok_, r);
  Delta pending;
  pending.cached_tokens = res.cached_tokens;
  on_delta(std::exchange(pending, Delta{}));  // the prompt is in
  std::optional<LogprobRow> row;
  GenerateHooks hooks;
  hooks.constraint = r.constraint.get();
  if (r.logprobs >= 0)
    hooks.on_logits = [&](std::span<const float> l) { row.emplace(l, r.logprobs); };
  std::vector<int32_t> generated;
  auto last = t0;
  auto flush = [&] {
    if (!pending.empty()) on_delta(std::exchange(pending, Delta{}));
  };
  res.finish = Finish::length;
  auto on_token = [&](int32_t t) {
    const auto now = Clock::now();
    if (generated.empty())
      res.ttft_s = std::chrono::duration<double>(now - t0).count();
    else
      res.token_gaps.push_back(float(std::chrono::duration<double>(now - last).count()));
    last = now;
    generated.push_back(t);
    if (row) pending.logprobs.push_back(row->of(t));
    if (is_end_token(t) && !r.ignore_eos) {
      res.finish = Finish::stop;
      return false;
    }
    out.push(t, pending);
    res.tool_calls += int(pending.chat.tool_calls.size());
    flush();
    if (out.stopped()) {
      res.finish = Finish::stop, res.stop_string = true;
      res.stop_sequence = out.stop_sequence();
      return false;
    }
    if (r.constraint && r.constraint->done()) {  // the grammar's text is whole
      res.finish = Finish::stop;
      return false;
    }
    if (cancelled(r)) {
      res.finish = Finish::cancelled;
      return false;
    }
    return true;
  };
  const int max_tokens = int(std::min<int64_t>(r.max_tokens, ctx_ - n));
  if (max_tokens > 0) {
    be_.start_sampling(*s.seq, r.sampling, r.prompt);
    be_.generate(*s.seq, r.prompt.back(), max_tokens, on_token, hooks);
  }
  out.finish(pending);
  res.tool_calls += int(pending.chat.tool_calls.size());
  flush();
  if (res.finish == Finish::stop && !res.stop_string && res.tool_calls > 0)
    res.finish = Finish::tool_calls;
  res.completion_tokens = int64_t(generated.size());
  res.decode_s = std::chrono::duration<double>(last - t0).count() - res.ttft_s;

  // The session holds the prefilled prompt and what generate() fed: the last
  // prompt token, then the completion but its last token where max_tokens ended it.
  const int64_t fed = s.seq->length() - int64_t(s.tokens.size());
  TERN_CHECK(fed >= 0 && fed <= int64_t(generated.size()) + 1);
  if (fed > 0) {
    s.tokens.push_back(r.prompt.back());
    s.tokens.insert(s.tokens.end(), generated.begin(), generated.begin() + (fed - 1));
  }
  TERN_CHECK(int64_t(s.tokens.size()) == s.seq->length());
  cache_.release(std::move(s));
  return res;
}

}  // namespace tern
