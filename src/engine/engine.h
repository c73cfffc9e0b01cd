// The generation flow every front end shares (tern run, chat, serve): a
// request's prompt served from the session cache where it can be, the rest
// prefilled by plan (prefill_plan.h, snapshots on the way), then streamed
// tokens detokenized, parsed into reasoning / content / tool calls, cut at
// stop strings and end tokens, with usage and timings at the end. An engine
// runs its requests (streams) on the thread that owns the backend, one alone
// (run) or several in decode steps together (step; the Scheduler).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "engine/prefill_plan.h"
#include "engine/request.h"
#include "engine/session_cache.h"
#include "engine/stream.h"
#include "tokenizer/tokenizer.h"

namespace tern {

struct EngineOptions {
  size_t cache_bytes = size_t(4) << 30;  // session cache budget (0: no reuse)
  int64_t snapshot_every = 4096;         // periodic snapshots inside long prompts (0: none)
  int64_t chunk = 0;                     // longest prefill call (0: the backend's choice)
  int64_t ctx_size = 0;                  // prompt + completion at most (0: the model's)
  // The disk tier (disk_cache.h): off without a directory. Its entries are
  // bound to model_id (checkpoint/fingerprint.h), the backend's numerics, the
  // prefill plan and this build.
  std::string cache_dir;
  size_t cache_disk = 0;  // its budget
  std::string model_id;
};

class Engine {
 public:
  // `tok` may be null (token ids only: no text, no stop strings).
  Engine(Backend& be, const Tokenizer* tok, const EngineOptions& o);

  // Runs r to its end, calling on_delta with each piece of output. Throws
  // tern::Error on bad input (a token outside the vocabulary, a prompt too long).
  Result run(const Request& r, const std::function<void(Delta&&)>& on_delta);
  // One decode step of several streams in their decode phase (Backend::step).
  void step(std::span<Stream* const> streams);

  Backend& backend() { return be_; }
  const Tokenizer* tokenizer() const { return tok_; }
  const SessionCache& cache() const { return cache_; }
  const DiskCache* disk() const { return disk_.get(); }
  // Whether state is kept for later requests (in memory or on disk).
  bool reuses() const { return cache_.budget() > 0 || disk_; }
  int64_t ctx_size() const { return ctx_; }
  // What a sequence of `positions` tokens holds: its KV rows, its recurrent
  // and conv state (the KV cache's capacity grows by doubling, so up to
  // twice the rows' bytes are allocated).
  size_t sequence_bytes(int64_t positions) const;
  // That for r: its prompt and the completion it may reach, within the context.
  size_t sequence_need(const Request& r) const;
  bool is_end_token(int32_t id) const;
  // The tokens that end a completion (the model's eos, <|im_end|>, <|endoftext|>).
  const std::vector<int32_t>& end_ids() const { return end_ids_; }

 private:
  friend class Stream;
  Backend& be_;
  const Tokenizer* tok_;
  PrefillPolicy policy_;
  int64_t ctx_;
  std::vector<int32_t> end_ids_;
  std::unique_ptr<DiskCache> disk_;  // before cache_: queued writes outlive the sessions
  SessionCache cache_;
};

}  // namespace tern
