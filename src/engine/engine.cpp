#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/error.h"
#include "core/hash.h"

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

size_t Engine::sequence_bytes(int64_t positions) const {
  return be_.kv_bytes(0, positions) + be_.state_bytes();
}

size_t Engine::sequence_need(const Request& r) const {
  const int64_t prompt = int64_t(r.prompt.size());
  return sequence_bytes(std::min(ctx_, prompt + std::max<int64_t>(r.max_tokens, 0)));
}

Result Engine::run(const Request& r, const std::function<void(Delta&&)>& on_delta) {
  Stream s(*this, r, on_delta);
  while (s.phase() == Stream::Phase::prefill) s.prefill();
  if (s.phase() == Stream::Phase::decode) s.generate(r.max_tokens);
  return s.finish();
}

void Engine::step(std::span<Stream* const> streams) {
  std::vector<StepRow> rows;
  rows.reserve(streams.size());
  for (Stream* s : streams) rows.push_back(s->row());
  be_.step(rows);
  for (size_t i = 0; i < rows.size(); ++i) streams[i]->accept(rows[i].next);
}

}  // namespace tern
