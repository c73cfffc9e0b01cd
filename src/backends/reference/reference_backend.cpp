#include "backends/reference/reference_backend.h"

#include <sys/mman.h>

#include <algorithm>

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

std::string ReferenceBackend::numerics_id() const {
  const char* forms[] = {"automatic", "recurrent", "chunked"};
  return fmt::format("cpu-ref fp32 delta={}", forms[int(form_)]);
}

namespace {

// A float vector's elements [at, at + n) as bytes.
std::span<const std::byte> bytes_of(const std::vector<float>& v, size_t at, size_t n) {
  return std::as_bytes(std::span(v).subspan(at, n));
}
std::span<std::byte> bytes_of(std::vector<float>& v, size_t at, size_t n) {
  return std::as_writable_bytes(std::span(v).subspan(at, n));
}

// Room for n floats in v, in 2 MB pages where transparent huge pages allow
// (the advice precedes every touch, the copy of what v held included): a load
// writes megabytes at once, and on some VMs a 4 KB page fault costs more than
// copying its bytes (~11 us a page measured here).
void reserve_in_huge_pages(std::vector<float>& v, size_t n) {
  if (v.capacity() >= n) return;
  std::vector<float> room;
  room.reserve(n);
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  const uintptr_t from = (uintptr_t(room.data()) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t to = uintptr_t(room.data() + room.capacity()) & ~(kHuge - 1);
  if (to > from) ::madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);
  room.assign(v.begin(), v.end());
  v.swap(room);
}

}  // namespace

// Per attention layer, K's rows [from, to) then V's, fp32 as held.
size_t ReferenceBackend::kv_bytes(int64_t from, int64_t to) const {
  const ModelConfig& c = w_->cfg;
  return size_t(c.n_full_layers()) * 2 * size_t(to - from) * size_t(c.n_kv_heads) *
         size_t(c.head_dim) * sizeof(float);
}

void ReferenceBackend::export_kv(const Sequence& seq, int64_t from, int64_t to,
                                 const ByteSink& out) {
  const auto& s = dynamic_cast<const ReferenceSequence&>(seq);
  TERN_CHECK(0 <= from && from <= to && to <= s.length());
  const size_t row = size_t(w_->cfg.n_kv_heads) * size_t(w_->cfg.head_dim);
  for (size_t i = 0; i < s.kv.size(); ++i) {
    if (w_->cfg.layer_types[i] == LayerType::linear_attention) continue;
    for (const auto* v : {&s.kv[i].k, &s.kv[i].v})
      out(bytes_of(*v, size_t(from) * row, size_t(to - from) * row));
  }
}

void ReferenceBackend::reserve(Sequence& seq, int64_t positions) {
  auto& s = dynamic_cast<ReferenceSequence&>(seq);
  const size_t row = size_t(w_->cfg.n_kv_heads) * size_t(w_->cfg.head_dim);
  for (size_t i = 0; i < s.kv.size(); ++i)
    if (w_->cfg.layer_types[i] != LayerType::linear_attention)
      for (auto* v : {&s.kv[i].k, &s.kv[i].v}) reserve_in_huge_pages(*v, size_t(positions) * row);
}

void ReferenceBackend::import_kv(Sequence& seq, int64_t from, int64_t to, const ByteSource& in) {
  auto& s = dynamic_cast<ReferenceSequence&>(seq);
  TERN_CHECK(s.length() == from && from <= to);
  const size_t row = size_t(w_->cfg.n_kv_heads) * size_t(w_->cfg.head_dim);
  for (size_t i = 0; i < s.kv.size(); ++i) {
    if (w_->cfg.layer_types[i] == LayerType::linear_attention) continue;
    for (auto* v : {&s.kv[i].k, &s.kv[i].v}) {
      TERN_CHECK(v->size() == size_t(from) * row);
      if (v->capacity() < size_t(to) * row)  // geometric growth, as resize's
        reserve_in_huge_pages(*v, std::max(size_t(to) * row, 2 * v->capacity()));
      v->resize(size_t(to) * row);
      in(bytes_of(*v, size_t(from) * row, size_t(to - from) * row));
    }
  }
  advance(s, to - from);
}

size_t ReferenceBackend::state_bytes() const {
  const ModelConfig& c = w_->cfg;
  return size_t(c.n_linear_layers()) * (model::gdn_conv_floats(c) + model::gdn_state_floats(c)) *
         sizeof(float);
}

// Per GDN layer, the conv state then the recurrent state.
void ReferenceBackend::export_state(const SequenceState& st, const ByteSink& out) const {
  for (const model::GdnState& g : dynamic_cast<const CpuState&>(st).gdn) {
    if (g.S.empty()) continue;
    out(bytes_of(g.conv, 0, g.conv.size()));
    out(bytes_of(g.S, 0, g.S.size()));
  }
}

std::unique_ptr<SequenceState> ReferenceBackend::import_state(int64_t length,
                                                              const ByteSource& in) {
  const ModelConfig& c = w_->cfg;
  std::vector<model::GdnState> gdn(size_t(c.n_layers));
  for (int i = 0; i < c.n_layers; ++i) {
    if (c.layer_types[size_t(i)] != LayerType::linear_attention) continue;
    model::GdnState& g = gdn[size_t(i)];
    reserve_in_huge_pages(g.conv, model::gdn_conv_floats(c));
    reserve_in_huge_pages(g.S, model::gdn_state_floats(c));
    g.conv.resize(model::gdn_conv_floats(c));
    g.S.resize(model::gdn_state_floats(c));
    in(bytes_of(g.conv, 0, g.conv.size()));
    in(bytes_of(g.S, 0, g.S.size()));
  }
  return std::make_unique<CpuState>(std::move(gdn), length);
}

size_t ReferenceBackend::sequence_bytes(const Sequence& seq) const {
  const auto& s = dynamic_cast<const ReferenceSequence&>(seq);
  size_t b = 0;
  for (const auto& kv : s.kv) b += (kv.k.capacity() + kv.v.capacity()) * sizeof(float);
  for (const auto& g : s.gdn) b += (g.conv.capacity() + g.S.capacity()) * sizeof(float);
  return b;
}

}  // namespace tern
