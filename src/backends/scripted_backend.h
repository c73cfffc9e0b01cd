// A backend that replays given replies instead of running the model, so that
// tests (and the server's test runs) can exercise what depends on what the
// model says: tool calls, reasoning, stop strings, with the real sampler and
// engine around it. A reply is chosen by the prompt: the script entry whose
// trigger text occurs last in the prompt (an empty trigger matches any
// prompt). The next token is the first token of the reply's remaining text,
// which the logits make certain (one logit 60 above the rest); past the
// reply's end, <|im_end|>. Session state is the token list, so snapshots,
// forks and split generation behave as on a real backend.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "tokenizer/tokenizer.h"

namespace tern {

struct ScriptEntry {
  std::string trigger;  // text that selects this reply ("" matches any prompt)
  std::string reply;    // what the model says after the prompt
};

class ScriptedBackend : public Backend {
 public:
  // cfg: the model's shapes (vocab, end tokens, positions); tok outlives this.
  ScriptedBackend(const ModelConfig& cfg, const Tokenizer& tok, std::vector<ScriptEntry> script);

  std::unique_ptr<Sequence> new_sequence() override;
  void forward(Sequence& seq, std::span<const int32_t> tokens, Logits which,
               std::vector<float>& logits) override;
  void start_sampling(Sequence& seq, const SamplingParams& p,
                      std::span<const int32_t> history) override;
  std::unique_ptr<SequenceState> save(const Sequence& seq) override;
  void restore(Sequence& seq, const SequenceState& st) override;
  std::unique_ptr<Sequence> fork(const Sequence& seq, const SequenceState& st) override;
  size_t sequence_bytes(const Sequence& seq) const override;
  // The script's hash: another script's replies are another model's.
  std::string numerics_id() const override;
  // Its KV cache is the token ids; its state is only a length.
  size_t kv_bytes(int64_t from, int64_t to) const override;
  void export_kv(const Sequence& seq, int64_t from, int64_t to, const ByteSink& out) override;
  void reserve(Sequence&, int64_t) override {}
  void import_kv(Sequence& seq, int64_t from, int64_t to, const ByteSource& in) override;
  size_t state_bytes() const override { return 0; }
  void export_state(const SequenceState&, const ByteSink&) const override {}
  std::unique_ptr<SequenceState> import_state(int64_t length, const ByteSource& in) override;
  const ModelConfig& config() const override { return cfg_; }
  std::string name() const override { return "scripted"; }

 private:
  int32_t next_token(const Sequence& seq) const;
  ModelConfig cfg_;
  const Tokenizer& tok_;
  std::vector<ScriptEntry> script_;
  int32_t end_id_;
};

}  // namespace tern
