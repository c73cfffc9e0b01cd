#include "backends/cpu/cpu_backend.h"

#include "backends/cpu/moe.h"
#include "backends/cpu/ops.h"
#include "core/error.h"

namespace tern {

CpuSequence::CpuSequence(const ModelConfig& c) : gdn(size_t(c.n_layers)), kv(size_t(c.n_layers)) {
  for (int i = 0; i < c.n_layers; ++i)
    if (c.layer_types[size_t(i)] == LayerType::linear_attention)
      gdn[size_t(i)] = cpu::make_gdn_state(c);
}

CpuBackend::CpuBackend(std::shared_ptr<const ModelWeights> w, cpu::DeltaForm form)
    : w_(std::move(w)), form_(form) {}

std::unique_ptr<Sequence> CpuBackend::new_sequence() {
  return std::make_unique<CpuSequence>(w_->cfg);
}

void CpuBackend::check_tokens(const CpuSequence& seq, std::span<const int32_t> tokens) const {
  const ModelConfig& c = w_->cfg;
  const int64_t T = int64_t(tokens.size());
  if (T == 0) fail("forward needs at least one token");
  if (seq.length() + T > c.max_positions)
    fail("sequence of {} tokens exceeds the model's {} positions", seq.length() + T,
         c.max_positions);
  for (const int32_t id : tokens)
    if (id < 0 || id >= c.vocab) fail("token id {} is outside the vocabulary [0, {})", id, c.vocab);
}

void CpuBackend::forward(Sequence& seq_base, std::span<const int32_t> tokens, Logits which,
                         std::vector<float>& logits) {
  auto& seq = dynamic_cast<CpuSequence&>(seq_base);
  check_tokens(seq, tokens);
  const ModelConfig& c = w_->cfg;
  const int64_t T = int64_t(tokens.size()), D = c.hidden;
  std::vector<float> h(size_t(T * D)), a(size_t(T * D)), y(size_t(T * D));
  for (int64_t t = 0; t < T; ++t) w_->embed.dequant_row(tokens[size_t(t)], &h[size_t(t * D)]);
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerWeights& L = w_->layers[size_t(i)];
    for (int64_t t = 0; t < T; ++t)
      cpu::rms_norm(&h[size_t(t * D)], L.in_norm.data(), D, c.rms_eps, &a[size_t(t * D)]);
    if (L.type == LayerType::linear_attention)
      cpu::gdn_forward(c, L.gdn, a.data(), T, seq.gdn[size_t(i)], y.data(), form_);
    else
      cpu::attention_forward(c, L.attn, a.data(), T, seq.length(), seq.kv[size_t(i)], y.data());
    for (size_t j = 0; j < h.size(); ++j) h[j] += y[j];
    for (int64_t t = 0; t < T; ++t)
      cpu::rms_norm(&h[size_t(t * D)], L.post_norm.data(), D, c.rms_eps, &a[size_t(t * D)]);
    cpu::moe_forward(c, L.moe, a.data(), T, y.data());
    for (size_t j = 0; j < h.size(); ++j) h[j] += y[j];
  }
  advance(seq, T);
  const int64_t first = which == Logits::all ? 0 : T - 1, n = T - first;
  for (int64_t t = 0; t < n; ++t)
    cpu::rms_norm(&h[size_t((first + t) * D)], w_->final_norm.data(), D, c.rms_eps,
                  &a[size_t(t * D)]);
  logits.resize(size_t(n * c.vocab));
  cpu::matmul(w_->lm_head, a.data(), n, logits.data());
}

}  // namespace tern
