#include "backends/reference/reference_backend.h"

#include "core/error.h"
#include "model/moe.h"
#include "model/ops.h"

namespace tern {

ReferenceSequence::ReferenceSequence(const ModelConfig& c)
    : gdn(size_t(c.n_layers)), kv(size_t(c.n_layers)) {
  for (int i = 0; i < c.n_layers; ++i)
    if (c.layer_types[size_t(i)] == LayerType::linear_attention)
      gdn[size_t(i)] = model::make_gdn_state(c);
}

ReferenceBackend::ReferenceBackend(std::shared_ptr<const ModelWeights> w, model::DeltaForm form)
    : w_(std::move(w)), form_(form) {}

std::unique_ptr<Sequence> ReferenceBackend::new_sequence() {
  return std::make_unique<ReferenceSequence>(w_->cfg);
}

void ReferenceBackend::forward(Sequence& seq_base, std::span<const int32_t> tokens, Logits which,
                               std::vector<float>& logits) {
  auto& seq = dynamic_cast<ReferenceSequence&>(seq_base);
  check_tokens(seq, tokens);
  const ModelConfig& c = w_->cfg;
  const int64_t T = int64_t(tokens.size()), D = c.hidden;
  std::vector<float> h(size_t(T * D)), a(size_t(T * D)), y(size_t(T * D));
  for (int64_t t = 0; t < T; ++t) w_->embed.dequant_row(tokens[size_t(t)], &h[size_t(t * D)]);
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerWeights& L = w_->layers[size_t(i)];
    for (int64_t t = 0; t < T; ++t)
      model::rms_norm(&h[size_t(t * D)], L.in_norm.data(), D, c.rms_eps, &a[size_t(t * D)]);
    if (L.type == LayerType::linear_attention)
      model::gdn_forward(c, L.gdn, a.data(), T, seq.gdn[size_t(i)], y.data(), form_);
    else
      model::attention_forward(c, L.attn, a.data(), T, seq.length(), seq.kv[size_t(i)], y.data());
    for (size_t j = 0; j < h.size(); ++j) h[j] += y[j];
    for (int64_t t = 0; t < T; ++t)
      model::rms_norm(&h[size_t(t * D)], L.post_norm.data(), D, c.rms_eps, &a[size_t(t * D)]);
    model::moe_forward(c, L.moe, a.data(), T, y.data());
    for (size_t j = 0; j < h.size(); ++j) h[j] += y[j];
  }
  advance(seq, T);
  if (which == Logits::none) {
    logits.clear();
    return;
  }
  const int64_t first = which == Logits::all ? 0 : T - 1, n = T - first;
  for (int64_t t = 0; t < n; ++t)
    model::rms_norm(&h[size_t((first + t) * D)], w_->final_norm.data(), D, c.rms_eps,
                    &a[size_t(t * D)]);
  logits.resize(size_t(n * c.vocab));
  model::matmul(w_->lm_head, a.data(), n, logits.data());
}

namespace {

struct CpuState : SequenceState {
  CpuState(std::vector<model::GdnState> g, int64_t n) : gdn(std::move(g)) { length_ = n; }
  std::vector<model::GdnState> gdn;  // per layer, as ReferenceSequence::gdn
  size_t bytes() const override {
    size_t b = 0;
    for (const auto& l : gdn) b += (l.conv.size() + l.S.size()) * sizeof(float);
    return b;
  }
};

}  // namespace

std::unique_ptr<SequenceState> ReferenceBackend::save(const Sequence& seq) {
  const auto& s = dynamic_cast<const ReferenceSequence&>(seq);
  return std::make_unique<CpuState>(s.gdn, s.length());
}

void ReferenceBackend::restore(Sequence& seq, const SequenceState& st) {
  auto& s = dynamic_cast<ReferenceSequence&>(seq);
  const auto& cs = dynamic_cast<const CpuState&>(st);
  TERN_CHECK(cs.length() <= s.length());
  const size_t row = size_t(w_->cfg.n_kv_heads) * size_t(w_->cfg.head_dim);
  for (auto& kv : s.kv) {
    if (kv.k.empty()) continue;
    kv.k.resize(size_t(cs.length()) * row);
    kv.v.resize(size_t(cs.length()) * row);
  }
  s.gdn = cs.gdn;
  s.length_ = cs.length();
}

std::unique_ptr<Sequence> ReferenceBackend::fork(const Sequence& seq, const SequenceState& st) {
  const auto& s = dynamic_cast<const ReferenceSequence&>(seq);
  TERN_CHECK(st.length() <= s.length());
  auto f = std::make_unique<ReferenceSequence>(w_->cfg);
  const size_t n = size_t(st.length()) * size_t(w_->cfg.n_kv_heads) * size_t(w_->cfg.head_dim);
  for (size_t i = 0; i < s.kv.size(); ++i) {
    if (s.kv[i].k.empty()) continue;
    f->kv[i].k.assign(s.kv[i].k.begin(), s.kv[i].k.begin() + ptrdiff_t(n));
    f->kv[i].v.assign(s.kv[i].v.begin(), s.kv[i].v.begin() + ptrdiff_t(n));
  }
  f->gdn = dynamic_cast<const CpuState&>(st).gdn;
  f->length_ = st.length();
  return f;
}

size_t ReferenceBackend::sequence_bytes(const Sequence& seq) const {
  const auto& s = dynamic_cast<const ReferenceSequence&>(seq);
  size_t b = 0;
  for (const auto& kv : s.kv) b += (kv.k.capacity() + kv.v.capacity()) * sizeof(float);
  for (const auto& g : s.gdn) b += (g.conv.capacity() + g.S.capacity()) * sizeof(float);
  return b;
}

}  // namespace tern
