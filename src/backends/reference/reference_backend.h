// The CPU reference backend (--backend cpu-ref): the forward pass every other
// backend is tested against. fp32 activations, weights expanded a row block at
// a time, multithreaded over the global thread pool. The fast CPU backend
// (backends/cpu/fast_backend.h) derives from it and shares its sequence state.
#pragma once

#include "backend/backend.h"
#include "model/attention.h"
#include "model/gdn.h"

namespace tern {

class ReferenceSequence : public Sequence {
 public:
  explicit ReferenceSequence(const ModelConfig& c);
  std::vector<model::GdnState> gdn;  // per layer (empty for attention layers)
  std::vector<model::KvCache> kv;    // per layer (empty for linear layers)
  friend class ReferenceBackend;
};

class ReferenceBackend : public Backend {
 public:
  explicit ReferenceBackend(std::shared_ptr<const ModelWeights> w,
                            model::DeltaForm form = model::DeltaForm::automatic);
  std::unique_ptr<Sequence> new_sequence() override;
  void forward(Sequence& seq, std::span<const int32_t> tokens, Logits which,
               std::vector<float>& logits) override;
  std::unique_ptr<SequenceState> save(const Sequence& seq) override;
  void restore(Sequence& seq, const SequenceState& st) override;
  std::unique_ptr<Sequence> fork(const Sequence& seq, const SequenceState& st) override;
  size_t sequence_bytes(const Sequence& seq) const override;
  std::string numerics_id() const override;
  size_t kv_bytes(int64_t from, int64_t to) const override;
  void export_kv(const Sequence& seq, int64_t from, int64_t to, const ByteSink& out) override;
  void reserve(Sequence& seq, int64_t positions) override;
  void import_kv(Sequence& seq, int64_t from, int64_t to, const ByteSource& in) override;
  size_t state_bytes() const override;
  void export_state(const SequenceState& st, const ByteSink& out) const override;
  std::unique_ptr<SequenceState> import_state(int64_t length, const ByteSource& in) override;
  int64_t prefill_chunk() const override { return 128; }
  const ModelConfig& config() const override { return w_->cfg; }
  std::string name() const override { return "cpu-ref"; }

 protected:
  static void advance(ReferenceSequence& seq, int64_t n) { seq.length_ += n; }

  std::shared_ptr<const ModelWeights> w_;
  model::DeltaForm form_;
};

}  // namespace tern
