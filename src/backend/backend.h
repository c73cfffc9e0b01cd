// The interface every backend (CPU, CUDA) implements: one model definition,
// computed the same way everywhere. A Sequence holds one conversation's state
// (KV cache, recurrent and conv state, position); forward() appends tokens to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/constraint.h"
#include "backend/sampler.h"
#include "checkpoint/weights.h"

namespace tern {

class Sequence {
 public:
  virtual ~Sequence() = default;
  Sequence() = default;
  Sequence(const Sequence&) = delete;  // backends' sequences own their buffers
  Sequence& operator=(const Sequence&) = delete;
  int64_t length() const { return length_; }
  // The completion in progress (Backend::start_sampling): penalty counts and
  // draw counter, carried across generate() calls. Backends that sample on
  // the device keep that state there instead.
  std::optional<Sampler> sampler;

 protected:
  int64_t length_ = 0;
};

// A sequence's recurrent and conv state after its first length() tokens (a
// session snapshot, kept in the backend's own precision and memory).
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  int64_t length() const { return length_; }
  // Memory it holds.
  virtual size_t bytes() const = 0;

 protected:
  int64_t length_ = 0;
};

// The disk cache's byte streams (engine/disk_cache.h): a sink takes bytes in
// order; a source fills the span it is given or throws tern::Error.
using ByteSink = std::function<void(std::span<const std::byte>)>;
using ByteSource = std::function<void(std::span<std::byte>)>;

// Which logits forward() returns: the last token's, every token's (scoring)
// or none (a prefill chunk whose logits nobody reads: no lm_head).
enum class Logits { last, all, none };

// Optional parts of generate().
struct GenerateHooks {
  TokenConstraint* constraint = nullptr;
  // The raw logits (before penalties, temperature and mask) each chosen token
  // was drawn from, called just before on_token with that token (logprobs).
  std::function<void(std::span<const float>)> on_logits;
};

// One sequence's row of a decode step over several (Backend::step).
struct StepRow {
  Sequence* seq;
  int32_t token;               // fed to seq
  const GenerateHooks* hooks;  // its constraint and on_logits
  int32_t next = -1;           // the token chosen after it
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::unique_ptr<Sequence> new_sequence() = 0;
  // Runs `tokens` after those already in `seq`. Writes float logits for the
  // last token ([vocab]), for every token ([n, vocab]) or none (empty) into
  // `logits`.
  virtual void forward(Sequence& seq, std::span<const int32_t> tokens, Logits which,
                       std::vector<float>& logits) = 0;
  // Starts a completion on `seq`: sampling parameters `p`, penalty counts of
  // `history` (the tokens the penalties look back on: the prompt, the last
  // token that generate() feeds included), draw counter 0.
  virtual void start_sampling(Sequence& seq, const SamplingParams& p,
                              std::span<const int32_t> history);
  // Streams tokens of the completion started on `seq`: feeds `first` after the
  // tokens in `seq`, then each chosen token, calling on_token with every choice
  // in order until it returns false or max_tokens were chosen. Afterwards `seq`
  // holds every delivered token but the last one when max_tokens ended the
  // run; when on_token ended it, the last one is fed too (the CUDA backend runs
  // one step ahead of the caller, and every backend does the same). Several
  // calls (each `first` the previous call's last token) choose exactly what
  // one call would. With hooks.constraint, only the tokens it allows are
  // drawn; with hooks.on_logits, each choice's raw logits come first.
  // The default runs forward() and seq.sampler.
  virtual void generate(Sequence& seq, int32_t first, int max_tokens,
                        const std::function<bool(int32_t)>& on_token,
                        const GenerateHooks& hooks = {});
  // One decode step of several sequences (continuous batching; each one's
  // completion started by start_sampling): feeds each row's token to its
  // sequence and chooses its next token as generate() for one token would,
  // with the row's own sampler, constraint and on_logits. A row's logits and
  // choice are bit for bit what they would be alone, whatever the other rows.
  // The default runs generate() for one token a row.
  virtual void step(std::span<StepRow> rows);
  // Session reuse. The state of `seq` as it is now.
  virtual std::unique_ptr<SequenceState> save(const Sequence& seq) = 0;
  // Rewinds `seq` to st.length() tokens, whose tokens must be the ones `st`
  // was saved after (the caller tracks them): its KV cache beyond is dropped,
  // its recurrent and conv state become st's.
  virtual void restore(Sequence& seq, const SequenceState& st) = 0;
  // A new sequence holding the first st.length() tokens of `seq` (KV cache
  // copied) and st's state; `seq` is left as it was.
  virtual std::unique_ptr<Sequence> fork(const Sequence& seq, const SequenceState& st) = 0;
  // Memory a sequence holds (KV cache as allocated, recurrent and conv state).
  virtual size_t sequence_bytes(const Sequence& seq) const = 0;

  // The disk cache: state as bytes in the backend's own layout and precision,
  // so that importing what was exported is bit-exact. numerics_id() names
  // what decides the bits a forward pass computes beyond the weights (kernels,
  // instruction set, threads where they split sums): bytes exported under one
  // id are imported only under the same one.
  virtual std::string numerics_id() const = 0;
  // The KV cache of positions [from, to) of a sequence holding at least `to`.
  virtual size_t kv_bytes(int64_t from, int64_t to) const = 0;
  virtual void export_kv(const Sequence& seq, int64_t from, int64_t to, const ByteSink& out) = 0;
  // Room for `positions` in seq's KV cache at once (a load knows its length;
  // forward() grows the cache as it goes).
  virtual void reserve(Sequence& seq, int64_t positions) = 0;
  // Appends positions [from, to) to `seq`, which holds `from`: it then holds
  // `to`, its recurrent and conv state undefined until restore().
  virtual void import_kv(Sequence& seq, int64_t from, int64_t to, const ByteSource& in) = 0;
  virtual size_t state_bytes() const = 0;
  // Thread-safe: the disk cache's writer calls it while the engine runs
  // (a saved state is never modified).
  virtual void export_state(const SequenceState& st, const ByteSink& out) const = 0;
  virtual std::unique_ptr<SequenceState> import_state(int64_t length, const ByteSource& in) = 0;

  // Tokens a lone stream asks of one generate() call while other requests
  // may join between calls (each call's start costs the CUDA backend's
  // pipeline a bubble; elsewhere a call is just its steps).
  virtual int generate_slice() const { return 1; }
  // The longest prefill call the engine makes (the cancellation latency of a
  // prefill is one such call).
  virtual int64_t prefill_chunk() const { return 512; }

  // Memory free for more sequences now: the host's available memory, the
  // device's where the backend keeps them there.
  virtual size_t memory_free() const;

  virtual const ModelConfig& config() const = 0;
  virtual std::string name() const = 0;

  // tern::Error naming the first id outside the vocabulary.
  void check_ids(std::span<const int32_t> ids) const;

 protected:
  // The next token of seq's completion (started) from the logits of its last
  // token, as generate() chooses it: on_logits, the constraint's mask (into
  // `mask`, reused), the sampler; the constraint then accepts it.
  int32_t choose(Sequence& seq, std::span<float> logits, const GenerateHooks& hooks,
                 std::vector<uint32_t>& mask);
  // A forward() call's tokens: at least one, within the model's positions
  // after seq's, each in the vocabulary (tern::Error otherwise).
  void check_tokens(const Sequence& seq, std::span<const int32_t> tokens) const;
  // A sampling history must be ids of the vocabulary, at most the tokens in
  // seq and the one generate() feeds next.
  void check_history(const Sequence& seq, std::span<const int32_t> history) const;
};

}  // namespace tern
