#include "backends/cuda/prefill.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "backends/cuda/attn_prefill.h"
#include "backends/cuda/check.h"
#include "backends/cuda/gdn_prefill.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/misc.h"
#include "backends/cuda/moe_prefill.h"
#include "backends/cuda/prefill_act.h"
#include "backends/cuda/prefill_buffers.h"
#include "backends/cuda/prefill_gemm.h"

namespace tern::cuda {

namespace {

// Phase marks for PrefillProfile: an event after each phase's launches.
class PhaseMarks {
 public:
  PhaseMarks(PrefillProfile* p, cudaStream_t st) : p_(p), st_(st) {
    if (p_ != nullptr) marks_.push_back({PrefillPhase::other, "", record()});
  }
  // The launches since the last mark were phase ph, kernel `what`.
  void operator()(PrefillPhase ph, const char* what) {
    if (p_ != nullptr) marks_.push_back({ph, what, record()});
  }
  // Adds the phases' times (after the stream's work is done).
  ~PhaseMarks() {
    if (p_ == nullptr) return;
    cudaEventSynchronize(marks_.back().event);
    for (size_t i = 1; i < marks_.size(); ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, marks_[i - 1].event, marks_[i].event);
      p_->seconds[int(marks_[i].phase)] += double(ms) / 1e3;
      p_->kernels[marks_[i].what] += double(ms) / 1e3;
    }
    for (auto& m : marks_) cudaEventDestroy(m.event);
  }

 private:
  cudaEvent_t record() {
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "event");
    check(cudaEventRecord(e, st_), "event");
    return e;
  }
  PrefillProfile* p_;
  cudaStream_t st_;
  struct Mark {
    PrefillPhase phase;
    const char* what;
    cudaEvent_t event;
  };
  std::vector<Mark> marks_;
};

}  // namespace

// One chunk's launches: T tokens at positions pos0.. of a sequence, on the
// chunk's tile plan, each phase marked for the profile.
class Prefill::Pass {
 public:
  Pass(const Prefill& p, const CudaSequence& s, int T)
      : c_(p.w_.cfg),
        W_(p.w_),
        b_(*p.b_),
        st_(p.st_),
        logits_(p.logits_),
        T_(T),
        pos0_(int(s.length())),
        capacity_(s.capacity),
        plan_(plan_tiles(T, p.w_.cfg, p.opt_)),
        mark_(p.profile_, p.st_) {}
  void embed(const int* tokens);
  void input_norm(const DevLayer& L);
  void gdn_forward(const DevLayer& L, const LayerState& state);
  void attention_forward(const DevLayer& L, const LayerState& state);
  void post_norm(const DevLayer& L);
  void moe_forward(const DevLayer& L);
  void lm_head(Logits which, float* logits);

 private:
  // Stages rows for a GEMM (prefill_act.h) into b_.x16, b_.xscale.
  void stage(StageArgs a, PrefillPhase ph, const char* what);
  // A dense GEMM of the staged rows by M.
  void dense(const DMat& M, GemmOut out, float* y, int ldy, const char* what);

  const ModelConfig& c_;
  const DeviceWeights& W_;
  Buffers& b_;
  cudaStream_t st_;
  float* logits_;
  const int T_, pos0_, capacity_;
  const TilePlan plan_;
  PhaseMarks mark_;
};

Prefill::Prefill(const DeviceWeights& w, cudaStream_t st, float* logits)
    : w_(w), st_(st), logits_(logits) {}

Prefill::~Prefill() = default;

void Prefill::set_options(const PrefillOptions& o) {
  check_prefill_options(o);
  opt_ = o;
}

// The chunk's launches in the order of the reference's forward
// (reference_backend.cpp), the norms staging the GEMMs' inputs.
void Prefill::chunk(CudaSequence& s, const int* tokens, int T, Logits which, float* logits) {
  Pass p(*this, s, T);
  p.embed(tokens);
  for (int i = 0; i < w_.cfg.n_layers; ++i) {
    const DevLayer& L = w_.layers[size_t(i)];
    p.input_norm(L);
    if (L.type == LayerType::linear_attention)
      p.gdn_forward(L, s.layer(i));
    else
      p.attention_forward(L, s.layer(i));
    p.post_norm(L);
    p.moe_forward(L);
  }
  if (logits != nullptr) p.lm_head(which, logits);
}

void Prefill::Pass::stage(StageArgs a, PrefillPhase ph, const char* what) {
  a.out = b_.x16, a.xscale = b_.xscale, a.eps = c_.rms_eps;
  check(stage_rows(a, st_), "prefill staging");
  mark_(ph, what);
}

void Prefill::Pass::dense(const DMat& M, GemmOut out, float* y, int ldy, const char* what) {
  GemmArgs g;
  g.W = M, g.group_rows = M.rows, g.x = b_.x16, g.xscale = b_.xscale, g.n = T_, g.out = out;
  g.y = y, g.ldy = ldy, g.bn = plan_.dense_bn, g.bm = plan_.dense_bm;
  g.work = b_.gemm_work, g.work_floats = b_.gemm_floats;
  check(prefill_gemm(g, st_), "prefill dense GEMM");
  mark_(PrefillPhase::dense_gemm, what);
}

void Prefill::Pass::embed(const int* tokens) {
  check(embed_rows(W_.embed, tokens, T_, b_.h, st_), "prefill embed");
  mark_(PrefillPhase::other, "embed");
}

void Prefill::Pass::input_norm(const DevLayer& L) {
  stage({.x = b_.h, .T = T_, .K = c_.hidden, .mode = StageMode::norm, .norm = L.in_norm},
        PrefillPhase::other, "stage");
}

// The Gated DeltaNet mixer (model::gdn_forward): the in-projection; the conv,
// SiLU, q/k norms and gates, and the conv state past the chunk; the delta rule
// (the scan or the chunked form, by the plan); the gated RMSNorm (per value
// head, times silu(z)) staged for out_proj, which adds into h.
void Prefill::Pass::gdn_forward(const DevLayer& L, const LayerState& state) {
  const int C = c_.conv_channels(), Vd = c_.lin_value_dim(), Hv = c_.lin_v_heads;
  const int ld = L.in_proj.rows;
  dense(L.in_proj, GemmOut::store, b_.proj, ld, "in_proj");
  const GdnPrepArgs gp{.proj = b_.proj,
                       .T = T_,
                       .ld = ld,
                       .conv_w = L.conv,
                       .conv_state = state.conv,
                       .kernel = c_.conv_kernel,
                       .a_log = L.a_log,
                       .dt_bias = L.dt_bias,
                       .k_heads = c_.lin_k_heads,
                       .v_heads = Hv,
                       .q = b_.q,
                       .k = b_.k,
                       .v = b_.v,
                       .beta = b_.beta,
                       .g = b_.g};
  check(gdn_prep(gp, st_), "prefill GDN prep");
  check(gdn_conv_state(b_.proj, T_, ld, C, c_.conv_kernel, state.conv, st_), "conv state");
  mark_(PrefillPhase::gdn, "gdn_prep");
  const DeltaArgs da{b_.q,           b_.k, b_.v,    b_.beta, b_.g,    T_,
                     c_.lin_k_heads, Hv,   state.S, b_.o,    b_.delta};
  if (plan_.gdn_chunked) {
    check(gdn_chunk_prep(da, st_), "prefill delta rule (chunk factors)");
    mark_(PrefillPhase::gdn, "delta_prep");
    check(gdn_chunk_state(da, st_), "prefill delta rule (pass over the chunks)");
  } else {
    check(gdn_delta_scan(da, st_), "prefill delta rule");
  }
  mark_(PrefillPhase::gdn, "delta");
  stage({.x = b_.o,
         .T = T_,
         .K = Vd,
         .mode = StageMode::gated,
         .norm = L.gnorm,
         .gate = b_.proj + C,
         .gate_ld = ld},
        PrefillPhase::gdn, "gdn_stage");
  dense(L.out, GemmOut::add, b_.h, c_.hidden, "out_proj");
}

// The gated attention mixer (model::attention_forward): the qkv projection;
// q/k norms, RoPE and the KV append; causal flash attention over the cache;
// the output gate staged for o_proj, which adds into h.
void Prefill::Pass::attention_forward(const DevLayer& L, const LayerState& state) {
  const int ld = L.qkv.rows;
  dense(L.qkv, GemmOut::store, b_.proj, ld, "qkv");
  const AttnPrepArgs ap{.qkv = b_.proj,
                        .T = T_,
                        .pos0 = pos0_,
                        .q_norm = L.q_norm,
                        .k_norm = L.k_norm,
                        .eps = c_.rms_eps,
                        .heads = c_.n_heads,
                        .kv_heads = c_.n_kv_heads,
                        .rotary = c_.rotary_dim,
                        .capacity = capacity_,
                        .inv_freq = W_.rope_inv_freq,
                        .q16 = b_.q16,
                        .k_cache = state.k,
                        .v_cache = state.v};
  check(attn_prep(ap, st_), "prefill attention prep");
  mark_(PrefillPhase::attention, "attn_prep");
  const FlashArgs fa{.q16 = b_.q16,
                     .k_cache = state.k,
                     .v_cache = state.v,
                     .T = T_,
                     .pos0 = pos0_,
                     .heads = c_.n_heads,
                     .kv_heads = c_.n_kv_heads,
                     .capacity = capacity_,
                     .out = b_.o,
                     .work = b_.flash_work,
                     .work_floats = b_.flash_floats};
  check(attn_flash(fa, st_), "prefill attention");
  mark_(PrefillPhase::attention, "flash");
  stage({.x = b_.o,
         .T = T_,
         .K = c_.n_heads * kHeadDim,
         .mode = StageMode::gate,
         .gate = b_.proj,
         .gate_ld = ld},
        PrefillPhase::attention, "attn_stage");
  dense(L.o, GemmOut::add, b_.h, c_.hidden, "o_proj");
}

// Staged for the experts, and in fp32 for the router.
void Prefill::Pass::post_norm(const DevLayer& L) {
  stage({.x = b_.h,
         .T = T_,
         .K = c_.hidden,
         .mode = StageMode::norm,
         .norm = L.post_norm,
         .out32 = b_.a32},
        PrefillPhase::other, "stage");
}

// The MoE (model::moe_forward): routing on the device, the grouped GEMMs over
// the upper bound of tiles (gate/up with SwiGLU, down with the routing
// weights), the slots combined back into h in token order.
void Prefill::Pass::moe_forward(const DevLayer& L) {
  const int D = c_.hidden, I = c_.moe_inter;
  const int parts = router_parts(T_, L.router.rows, L.router.cols);
  check(router_logits(L.router, b_.a32, T_, parts, b_.rlogits, st_), "prefill router");
  mark_(PrefillPhase::other, "router");
  const RouteArgs ra{.logits = b_.rlogits,
                     .T = T_,
                     .E = c_.n_experts,
                     .top_k = c_.top_k,
                     .parts = parts,
                     .counts = b_.counts,
                     .offsets = b_.offsets,
                     .cursor = b_.cursor,
                     .ids = b_.ids,
                     .wts = b_.wts,
                     .slot_row = b_.slot_row,
                     .slot_w = b_.slot_w,
                     .token_slot = b_.token_slot,
                     .map = b_.map,
                     .map_count = b_.map_count,
                     .bn = plan_.moe_bn};
  check(route_tokens(ra, st_), "prefill routing");
  mark_(PrefillPhase::other, "route");
  GemmArgs up;
  up.W = L.gate_up, up.group_rows = 2 * I, up.pair = L.gate_up.tiles != nullptr ? 0 : I;
  up.x = b_.x16, up.xrow = b_.slot_row, up.xscale = b_.xscale, up.map = b_.map;
  up.map_count = b_.map_count, up.max_tiles = plan_.moe_tiles, up.out = GemmOut::swiglu;
  up.act = b_.act, up.bn = plan_.moe_bn, up.bm = plan_.moe_bm;
  check(prefill_gemm(up, st_), "prefill experts gate/up");
  mark_(PrefillPhase::moe_gemm, "gate_up");
  GemmArgs down;
  down.W = L.down, down.group_rows = D, down.x = b_.act, down.map = b_.map;
  down.map_count = b_.map_count, down.max_tiles = plan_.moe_tiles, down.out = GemmOut::weighted;
  down.y16 = b_.y16, down.ldy = D, down.row_w = b_.slot_w, down.bn = plan_.moe_bn;
  down.bm = plan_.moe_bm;
  check(prefill_gemm(down, st_), "prefill experts down");
  mark_(PrefillPhase::moe_gemm, "down");
  check(moe_combine(b_.y16, b_.token_slot, T_, c_.top_k + 1, D, b_.h, st_), "prefill combine");
  mark_(PrefillPhase::other, "combine");
}

// The final norm and lm_head: for the last row the decode step's GEMV (the
// norm in its prologue); for every row (scoring) the norm staged and the GEMM
// a piece of Buffers::kLogitRows rows at a time.
void Prefill::Pass::lm_head(Logits which, float* logits) {
  const int D = c_.hidden;
  const size_t V = size_t(c_.vocab);
  if (which == Logits::last) {
    check(gemv({.W = W_.lm_head,
                .x = b_.h + size_t(T_ - 1) * D,
                .norm = W_.final_norm,
                .eps = c_.rms_eps,
                .y = logits_},
               st_),
          "lm_head");
    check(cudaMemcpyAsync(logits, logits_, V * sizeof(float), cudaMemcpyDeviceToHost, st_),
          "logits");
    mark_(PrefillPhase::other, "lm_head");
    return;
  }
  for (int r0 = 0; r0 < T_; r0 += Buffers::kLogitRows) {
    const int n = std::min(Buffers::kLogitRows, T_ - r0);
    stage({.x = b_.h + size_t(r0) * D,
           .T = n,
           .K = D,
           .mode = StageMode::norm,
           .norm = W_.final_norm},
          PrefillPhase::other, "stage");
    GemmArgs g;
    g.W = W_.lm_head, g.group_rows = W_.lm_head.rows, g.x = b_.x16, g.xscale = b_.xscale, g.n = n;
    g.out = GemmOut::store, g.y = b_.lbuf, g.ldy = c_.vocab, g.bn = TilePlan::logits_bn(n);
    g.bm = plan_.logits_bm;
    check(prefill_gemm(g, st_), "prefill lm_head");
    check(cudaMemcpyAsync(logits + size_t(r0) * V, b_.lbuf, size_t(n) * V * sizeof(float),
                          cudaMemcpyDeviceToHost, st_),
          "logits");
  }
  check(cudaStreamSynchronize(st_), "logits");  // the piece buffer is reused
  mark_(PrefillPhase::other, "lm_head");
}

}  // namespace tern::cuda
