#include "backends/cpu/fast_backend.h"

#include <algorithm>
#include <chrono>

#include "backends/cpu/attention_layer.h"
#include "backends/cpu/gdn_layer.h"
#include "backends/cpu/moe_layer.h"
#include "backends/cpu/pack16.h"
#include "backends/cpu/prefault.h"
#include "core/error.h"
#include "model/ops.h"

namespace tern {

namespace cpu {

// The forward pass over one chunk of tokens, and every buffer it reuses.
class Model {
 public:
  Model(const ModelWeights& w, Isa isa, bool int8)
      : w_(w), ctx_{ThreadPool::global(), kernels(isa), int8, {}} {
    const ModelConfig& c = w.cfg;
    if (c.conv_kernel > 9) fail("the fast CPU backend takes conv kernels of at most 9 taps");
    if (c.top_k > 32) fail("the fast CPU backend routes to at most 32 experts a token");
    if (has_packed(w) && !int8) fail("weights repacked for the CPU kernels need int8 activations");
    prefault_weights(w, ctx_.pool);
    conv_t_.resize(size_t(c.n_layers));
    for (int i = 0; i < c.n_layers; ++i)
      if (c.layer_types[size_t(i)] == LayerType::linear_attention)
        conv_t_[size_t(i)] = transpose_conv(c, w.layers[size_t(i)].gdn);
  }

  Isa isa() const { return ctx_.k.isa; }
  bool int8() const { return ctx_.int8; }
  int threads() const { return ctx_.pool.size(); }
  int64_t alone_tokens() const { return ctx_.k.alone_tokens; }
  void set_part_times(PartTimes* t) { times_ = t; }

  // Runs each sequence's tokens after its positions (tokens: the runs'
  // rows in order); the logits of rows [first, T) to out.
  struct Run {
    ReferenceSequence* seq;
    int64_t n;
  };
  void chunk(std::span<const Run> runs, std::span<const int32_t> tokens, int64_t first,
             float* out) {
    const ModelConfig& c = w_.cfg;
    const int64_t T = int64_t(tokens.size()), D = c.hidden;
    float* h = grow(h_, size_t(T * D));
    float* a = grow(a_, size_t(T * D));
    float* y = grow(y_, size_t(T * D));
    for (int64_t t = 0; t < T; ++t) w_.embed.dequant_row(tokens[size_t(t)], h + t * D);
    rows_.clear();
    for (int64_t t0 = 0; const Run& r : runs) {
      rows_.push_back({t0, r.n, r.seq->length(), nullptr, nullptr});
      t0 += r.n;
    }
    const float* pending = nullptr;  // the last block's output, not yet added to h
    Clock clock(T == int64_t(runs.size()) ? times_ : nullptr);  // decode's tokens only
    for (int i = 0; i < c.n_layers; ++i) {
      const LayerWeights& L = w_.layers[size_t(i)];
      for (size_t r = 0; r < runs.size(); ++r) {
        rows_[r].gdn = &runs[r].seq->gdn[size_t(i)];
        rows_[r].kv = &runs[r].seq->kv[size_t(i)];
      }
      norm_rows(h, pending, L.in_norm, T, a);
      clock.lap(Part::norm);
      if (L.type == LayerType::linear_attention) {
        gdn_.forward(ctx_, c, L.gdn, conv_t_[size_t(i)], act_, T, rows_, y);
        clock.lap(Part::gdn);
      } else {
        attn_.forward(ctx_, c, L.attn, act_, T, rows_, y);
        clock.lap(Part::attention);
      }
      norm_rows(h, y, L.post_norm, T, a);
      clock.lap(Part::norm);
      moe_.forward(ctx_, c, L.moe, act_, T, y);
      clock.lap(Part::moe);
      pending = y;
    }
    const int64_t n = T - first;
    norm_rows(h + first * D, pending + first * D, w_.final_norm, n, a);
    clock.lap(Part::norm);
    const MatmulJob head[] = {{&w_.lm_head, &act_, nullptr, n, {out, c.vocab}}};
    ctx_.mm.run(ctx_.pool, ctx_.k, head);
    clock.lap(Part::head);
  }

 private:
  // Adds the time since the last lap to a part, when times are kept.
  class Clock {
   public:
    explicit Clock(PartTimes* t) : t_(t), last_(std::chrono::steady_clock::now()) {}
    void lap(Part p) {
      if (t_ == nullptr) return;
      const auto now = std::chrono::steady_clock::now();
      t_->seconds[int(p)] += std::chrono::duration<double>(now - last_).count();
      last_ = now;
    }

   private:
    PartTimes* t_;
    std::chrono::steady_clock::time_point last_;
  };

  // h += y (when y is given), then a = RMSNorm(h) * w, quantised into act_.
  void norm_rows(float* h, const float* y, const std::vector<float>& w, int64_t T, float* a) {
    const int64_t D = w_.cfg.hidden;
    ctx_.pool.run(size_t(T), [&](size_t t, int) {
      float* ht = h + int64_t(t) * D;
      if (y)
        for (int64_t d = 0; d < D; ++d) ht[d] += y[int64_t(t) * D + d];
      model::rms_norm(ht, w.data(), D, w_.cfg.rms_eps, a + int64_t(t) * D);
    });
    act_.set(ctx_.pool, ctx_.k, a, D, T, D, ctx_.int8);
  }

  const ModelWeights& w_;
  Context ctx_;
  std::vector<std::vector<float>> conv_t_;
  std::vector<float> h_, a_, y_;
  std::vector<SeqRows> rows_;
  Activations act_;
  GdnLayer gdn_;
  AttentionLayer attn_;
  MoeLayer moe_;
  PartTimes* times_ = nullptr;
};

}  // namespace cpu

FastCpuBackend::FastCpuBackend(std::shared_ptr<const ModelWeights> w, cpu::Isa isa,
                               bool int8_activations)
    : ReferenceBackend(std::move(w)),
      model_(std::make_unique<cpu::Model>(*w_, isa, int8_activations)) {}

FastCpuBackend::~FastCpuBackend() = default;

cpu::Isa FastCpuBackend::isa() const {
  return model_->isa();
}

std::string FastCpuBackend::numerics_id() const {
  return fmt::format("cpu isa={} int8={} pack16={} threads={}", cpu::isa_name(model_->isa()),
                     int(model_->int8()), int(cpu::has_packed(*w_)), model_->threads());
}

void FastCpuBackend::set_part_times(cpu::PartTimes* t) {
  model_->set_part_times(t);
}

void FastCpuBackend::forward(Sequence& seq_base, std::span<const int32_t> tokens, Logits which,
                             std::vector<float>& logits) {
  auto& seq = dynamic_cast<ReferenceSequence&>(seq_base);
  check_tokens(seq, tokens);
  const int64_t T = int64_t(tokens.size()), V = w_->cfg.vocab;
  logits.resize(which == Logits::none ? 0 : size_t((which == Logits::all ? T : 1) * V));
  for (int64_t c0 = 0; c0 < T; c0 += cpu::kMaxChunk) {
    const int64_t n = std::min(cpu::kMaxChunk, T - c0);
    // Every row's logits for Logits::all; the last row of the last chunk for
    // Logits::last; none for Logits::none.
    const int64_t first = which == Logits::all                   ? 0
                          : which == Logits::last && c0 + n == T ? n - 1
                                                                 : n;
    const cpu::Model::Run run[] = {{&seq, n}};
    model_->chunk(run, tokens.subspan(size_t(c0), size_t(n)), first,
                  logits.data() + (which == Logits::all ? c0 * V : 0));
    advance(seq, n);
  }
}

void FastCpuBackend::step(std::span<StepRow> rows) {
  // At most as many rows a pass as the kernels compute as alone.
  const size_t most = size_t(std::min(model_->alone_tokens(), cpu::kMaxChunk));
  if (rows.size() > most) {
    for (size_t i = 0; i < rows.size(); i += most)
      step(rows.subspan(i, std::min(most, rows.size() - i)));
    return;
  }
  const int64_t R = int64_t(rows.size()), V = w_->cfg.vocab;
  std::vector<cpu::Model::Run> runs;
  std::vector<int32_t> tokens;
  for (StepRow& r : rows) {
    if (!r.seq->sampler) fail("step() before start_sampling()");
    auto& seq = dynamic_cast<ReferenceSequence&>(*r.seq);
    check_tokens(seq, std::span(&r.token, 1));
    runs.push_back({&seq, 1});
    tokens.push_back(r.token);
  }
  step_logits_.resize(size_t(R * V));
  model_->chunk(runs, tokens, 0, step_logits_.data());
  for (int64_t i = 0; i < R; ++i) {
    advance(*runs[size_t(i)].seq, 1);
    StepRow& r = rows[size_t(i)];
    r.next = choose(*r.seq, std::span(step_logits_).subspan(size_t(i * V), size_t(V)), *r.hooks,
                    step_mask_);
  }
}

}  // namespace tern
