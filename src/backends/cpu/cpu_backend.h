// The CPU reference backend (--backend cpu-ref): the forward pass every other
// backend is tested against. fp32 activations, weights expanded a row block at
// a time, multithreaded over the global thread pool. The fast CPU backend
// (fast/fast_backend.h) derives from it and shares its sequence state.
#pragma once

#include "backends/cpu/attention.h"
#include "backends/cpu/gdn.h"
#include "engine/backend.h"

namespace tern {

class CpuSequence : public Sequence {
 public:
  explicit CpuSequence(const ModelConfig& c);
  std::vector<cpu::GdnState> gdn;  // per layer (empty for attention layers)
  std::vector<cpu::KvCache> kv;    // per layer (empty for linear layers)
  friend class CpuBackend;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(std::shared_ptr<const ModelWeights> w,
                      cpu::DeltaForm form = cpu::DeltaForm::automatic);
  std::unique_ptr<Sequence> new_sequence() override;
  void forward(Sequence& seq, std::span<const int32_t> tokens, Logits which,
               std::vector<float>& logits) override;
  std::unique_ptr<SequenceState> save(const Sequence& seq) override;
  void restore(Sequence& seq, const SequenceState& st) override;
  std::unique_ptr<Sequence> fork(const Sequence& seq, const SequenceState& st) override;
  size_t sequence_bytes(const Sequence& seq) const override;
  int64_t prefill_chunk() const override { return 128; }
  const ModelConfig& config() const override { return w_->cfg; }
  std::string name() const override { return "cpu-ref"; }

 protected:
  // Throws on an empty call, too many positions or a token outside the vocabulary.
  void check_tokens(const CpuSequence& seq, std::span<const int32_t> tokens) const;
  static void advance(CpuSequence& seq, int64_t n) { seq.length_ += n; }

  std::shared_ptr<const ModelWeights> w_;
  cpu::DeltaForm form_;
};

}  // namespace tern
