// CudaBackend's prompt processing: forward() cuts the tokens into chunks (at
// most PrefillOptions::chunk tokens) and runs each through the prefill kernels
// (prefill_act.h, prefill_gemm.h, moe_prefill.h, gdn_prefill.h,
// attn_prefill.h), layer by layer, with no host synchronisation inside the
// chunk: the routing's sizes stay on the device
// (the grouped GEMMs launch the upper bound of tiles). The KV cache, the
// recurrent and conv state and the position carry over chunks and calls
// exactly as the decode step leaves them, so generate() continues from the
// sequence as it is (its first step feeds the prompt's last token).
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/attn_prefill.h"
#include "backends/cuda/check.h"
#include "backends/cuda/gdn_prefill.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/misc.h"
#include "backends/cuda/moe_prefill.h"
#include "backends/cuda/prefill_act.h"
#include "backends/cuda/prefill_buffers.h"
#include "backends/cuda/prefill_gemm.h"
#include "core/error.h"

namespace tern::cuda {

CudaBackend::PrefillBuffers::~PrefillBuffers() {
  for (void* p : ptrs) cudaFree(p);
}

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

void CudaBackend::set_prefill_options(const PrefillOptions& o) {
  if (o.chunk < 1 || o.step_below < 1 || o.chunked_from < 1 ||
      (o.moe_bn != 0 && !gemm_bn_valid(o.moe_bn, true)) ||
      (o.dense_bn != 0 && !gemm_bn_valid(o.dense_bn, false)) ||
      (o.gemm_bm != 0 && o.gemm_bm != 128 && o.gemm_bm != 256) ||
      (o.moe_bm != 0 && o.moe_bm != 128 && o.moe_bm != 256) ||
      (grouped_only_bn(o.moe_bn) && o.moe_bm == 256))
    fail(
        "prefill options: chunk {}, step_below {}, chunked_from {}, moe_bn {}, dense_bn {}, "
        "gemm_bm {}, moe_bm {}",
        o.chunk, o.step_below, o.chunked_from, o.moe_bn, o.dense_bn, o.gemm_bm, o.moe_bm);
  popt_ = o;
}

CudaBackend::PrefillBuffers& CudaBackend::prefill_buffers(int T) {
  if (pf_ != nullptr && pf_->T >= T) return *pf_;
  check(cudaStreamSynchronize(stream_), "prefill buffers");  // earlier chunks may use the old ones
  const int64_t token_cap = pf_ != nullptr ? pf_->token_cap : 0;
  int* tokens = pf_ != nullptr ? pf_->tokens : nullptr;
  if (pf_ != nullptr) {  // the token buffer moves over
    pf_->ptrs.erase(std::find(pf_->ptrs.begin(), pf_->ptrs.end(), static_cast<void*>(tokens)));
    pf_.reset();
  }
  const ModelConfig& c = w_->cfg;
  auto b = std::make_unique<PrefillBuffers>();
  b->T = T;
  b->tokens = tokens, b->token_cap = token_cap;
  if (tokens != nullptr) b->ptrs.push_back(tokens);
  auto alloc = [&](auto*& p, size_t n) {
    void* q = nullptr;
    check(cudaMalloc(&q, std::max<size_t>(n, 1) * sizeof(*p)), "cudaMalloc of prefill buffers");
    b->ptrs.push_back(q);
    p = static_cast<std::remove_reference_t<decltype(p)>>(q);
  };
  const size_t t = size_t(T), D = size_t(c.hidden), E = size_t(c.n_experts);
  const size_t K1 = size_t(c.top_k + 1), A = t * K1, I = size_t(c.moe_inter);
  const size_t Hk = size_t(c.lin_k_heads), Hv = size_t(c.lin_v_heads), H = size_t(c.n_heads);
  const size_t in_rows = size_t(c.conv_channels() + c.lin_value_dim() + 2 * c.lin_v_heads);
  const size_t qkv_rows = size_t(2 * c.n_heads + 2 * c.n_kv_heads) * kHeadDim;
  const size_t max_k = std::max({D, Hv * kGdnDim, H * kHeadDim, I});
  const bool gdn = c.n_linear_layers() > 0, attn = c.n_full_layers() > 0;
  alloc(b->h, t * D);
  alloc(b->x16, t * max_k);
  alloc(b->xscale, t);
  alloc(b->a32, t * D);
  alloc(b->proj, t * std::max(gdn ? in_rows : 0, attn ? qkv_rows : 0));
  alloc(b->o, t * std::max(Hv * kGdnDim, attn ? H * kHeadDim : 0));
  if (gdn) {
    alloc(b->q, t * Hk * kGdnDim);
    alloc(b->k, t * Hk * kGdnDim);
    alloc(b->v, t * Hv * kGdnDim);
    alloc(b->beta, t * Hv);
    alloc(b->g, t * Hv);
    alloc(b->delta, delta_scratch_floats(T, int(Hv)));
  }
  if (attn) {
    alloc(b->q16, H * t * kHeadDim);
    b->flash_floats = flash_work_floats(c.n_heads, c.n_kv_heads);
    alloc(b->flash_work, b->flash_floats);
  }
  b->gemm_floats = gemm_work_floats();
  alloc(b->gemm_work, b->gemm_floats);
  alloc(b->rlogits, router_logit_floats(int(t), E + 1));
  alloc(b->counts, E + 1);
  check(cudaMemsetAsync(b->counts, 0, (E + 1) * sizeof(int), stream_), "counts");
  alloc(b->offsets, E + 2);
  alloc(b->cursor, E + 1);
  alloc(b->ids, t * size_t(c.top_k));
  alloc(b->wts, A);
  alloc(b->slot_row, A);
  alloc(b->slot_w, A);
  alloc(b->token_slot, A);
  b->tile_cap = route_max_tiles(T, c.n_experts, c.top_k, 16);  // the narrowest tiles
  alloc(b->map, size_t(b->tile_cap));
  alloc(b->map_count, 1);
  alloc(b->act, A * I);
  alloc(b->y16, A * D);
  alloc(b->lbuf, size_t(PrefillBuffers::kLogitRows) * size_t(c.vocab));
  pf_ = std::move(b);
  return *pf_;
}

void CudaBackend::forward(Sequence& seq, std::span<const int32_t> tokens, Logits which,
                          std::vector<float>& logits) {
  auto& s = dynamic_cast<CudaSequence&>(seq);
  const ModelConfig& c = w_->cfg;
  const int64_t n = int64_t(tokens.size()), start = s.length();
  check_tokens(s, tokens);
  logits.resize(which == Logits::none ? 0 : size_t(which == Logits::all ? n : 1) * size_t(c.vocab));
  if (n < popt_.step_below) return forward_steps(s, tokens, which, logits);

  PrefillBuffers& b = prefill_buffers(int(std::min<int64_t>(n, popt_.chunk)));
  if (b.token_cap < n) {
    if (b.tokens != nullptr) {
      b.ptrs.erase(std::find(b.ptrs.begin(), b.ptrs.end(), static_cast<void*>(b.tokens)));
      cudaFree(b.tokens);
    }
    void* p = nullptr;
    check(cudaMalloc(&p, size_t(n) * sizeof(int)), "cudaMalloc of prefill tokens");
    b.tokens = static_cast<int*>(p), b.token_cap = n;
    b.ptrs.push_back(p);
  }
  check(cudaMemcpyAsync(b.tokens, tokens.data(), size_t(n) * sizeof(int), cudaMemcpyHostToDevice,
                        stream_),
        "tokens");
  reserve(s, std::min<int64_t>(start + n + 1, c.max_positions));  // the call's KV cache at once
  for (int64_t done = 0; done < n;) {
    const int64_t T = std::min<int64_t>(popt_.chunk, n - done);
    float* dst = logits.data();
    if (which == Logits::all) dst += size_t(done) * size_t(c.vocab);
    const bool last = done + T == n;
    run_chunk(s, b.tokens + done, int(T), which == Logits::all ? Logits::all : Logits::last,
              which == Logits::all || (last && which == Logits::last) ? dst : nullptr);
    done += T;
  }
  set_position(s, start + n);  // the decode step reads the position on the device; syncs
}

void CudaBackend::run_chunk(CudaSequence& s, const int* tokens_dev, int T, Logits which,
                            float* logits) {
  const ModelConfig& c = w_->cfg;
  const DeviceWeights& W = *w_;
  PrefillBuffers& b = *pf_;
  cudaStream_t st = stream_;
  PhaseMarks mark(profile_, st);
  const int D = c.hidden, E = c.n_experts, K1 = c.top_k + 1, I = c.moe_inter;
  const int pos0 = int(s.length());
  // Tiles no wider than the rows they get: a short chunk's GEMMs are bound by
  // reading the weights, not by the mmas of empty tile columns.
  const int dense_bn = popt_.dense_bn != 0 ? popt_.dense_bn
                       : T <= 16           ? 16
                       : T <= 32           ? 32
                       : T <= 512          ? 64
                                           : 128;
  // 128 weight rows at 64 slots (33 to 512 tokens): the dense GEMMs of a
  // 256- / 512-token prompt took 2.9 / 4.6 ms against 3.4 / 5.1 with 256 rows
  // (bench/results/prefill-tiles-*); 256 rows past that (2K: 14.7 against 16.7).
  const int dense_bm = popt_.gemm_bm != 0 ? popt_.gemm_bm : dense_bn == 64 ? 128 : 256;
  // By the mean rows an expert (T top_k / E), wide enough that most experts
  // take one tile (each tile dequantises its weights once): 48 slots from 1K
  // and 96 from 2K measured 31,451 against 30,706 (32) and 40,876 against
  // 38,867 (64) tok/s, 96 also ahead from 4K to 32K (bench/results/
  // prefill-ab-bb04154-h100.txt). Random routing spreads rows evenly; a real
  // router's busy experts take more tiles.
  const int per_expert = T * c.top_k / E;
  const int moe_bn = popt_.moe_bn != 0  ? popt_.moe_bn
                     : per_expert <= 10 ? 16
                     : per_expert <= 24 ? 32
                     : per_expert <= 40 ? 48
                                        : 96;
  const int moe_bm = popt_.moe_bm != 0                         ? popt_.moe_bm
                     : moe_bn == 64 || grouped_only_bn(moe_bn) ? 128
                                                               : 256;
  auto stage = [&](StageArgs a, PrefillPhase ph, const char* what) {
    a.out = b.x16, a.xscale = b.xscale, a.eps = c.rms_eps;
    check(stage_rows(a, st), "prefill staging");
    mark(ph, what);
  };
  auto dense = [&](const DMat& M, GemmOut out, float* y, int ldy, const char* what) {
    GemmArgs g;
    g.W = M, g.group_rows = M.rows, g.x = b.x16, g.xscale = b.xscale, g.n = T, g.out = out;
    g.y = y, g.ldy = ldy, g.bn = dense_bn, g.bm = dense_bm;
    g.work = b.gemm_work, g.work_floats = b.gemm_floats;
    check(prefill_gemm(g, st), "prefill dense GEMM");
    mark(PrefillPhase::dense_gemm, what);
  };
  check(embed_rows(W.embed, tokens_dev, T, b.h, st), "prefill embed");
  mark(PrefillPhase::other, "embed");
  for (int i = 0; i < c.n_layers; ++i) {
    const DevLayer& L = W.layers[size_t(i)];
    stage({.x = b.h, .T = T, .K = D, .mode = StageMode::norm, .norm = L.in_norm},
          PrefillPhase::other, "stage");
    if (L.type == LayerType::linear_attention) {
      const int C = c.conv_channels(), Vd = c.lin_value_dim(), Hv = c.lin_v_heads;
      const int ld = L.in_proj.rows;
      dense(L.in_proj, GemmOut::store, b.proj, ld, "in_proj");
      const GdnPrepArgs gp{.proj = b.proj,
                           .T = T,
                           .ld = ld,
                           .conv_w = L.conv,
                           .conv_state = s.conv[size_t(i)],
                           .kernel = c.conv_kernel,
                           .a_log = L.a_log,
                           .dt_bias = L.dt_bias,
                           .k_heads = c.lin_k_heads,
                           .v_heads = Hv,
                           .q = b.q,
                           .k = b.k,
                           .v = b.v,
                           .beta = b.beta,
                           .g = b.g};
      check(gdn_prep(gp, st), "prefill GDN prep");
      check(gdn_conv_state(b.proj, T, ld, C, c.conv_kernel, s.conv[size_t(i)], st), "conv state");
      mark(PrefillPhase::gdn, "gdn_prep");
      const DeltaArgs da{b.q, b.k,    b.v, b.beta, b.g, T, c.lin_k_heads, Hv, s.S[size_t(i)],
                         b.o, b.delta};
      check(T >= popt_.chunked_from ? gdn_delta_chunked(da, st) : gdn_delta_scan(da, st),
            "prefill delta rule");
      mark(PrefillPhase::gdn, "delta");
      stage({.x = b.o,
             .T = T,
             .K = Vd,
             .mode = StageMode::gated,
             .norm = L.gnorm,
             .gate = b.proj + C,
             .gate_ld = ld},
            PrefillPhase::gdn, "gdn_stage");
      dense(L.out, GemmOut::add, b.h, D, "out_proj");
    } else {
      const int ld = L.qkv.rows;
      dense(L.qkv, GemmOut::store, b.proj, ld, "qkv");
      const AttnPrepArgs ap{.qkv = b.proj,
                            .T = T,
                            .pos0 = pos0,
                            .q_norm = L.q_norm,
                            .k_norm = L.k_norm,
                            .eps = c.rms_eps,
                            .heads = c.n_heads,
                            .kv_heads = c.n_kv_heads,
                            .rotary = c.rotary_dim,
                            .capacity = s.capacity,
                            .inv_freq = W.rope_inv_freq,
                            .q16 = b.q16,
                            .k_cache = s.k[size_t(i)],
                            .v_cache = s.v[size_t(i)]};
      check(attn_prep(ap, st), "prefill attention prep");
      mark(PrefillPhase::attention, "attn_prep");
      const FlashArgs fa{.q16 = b.q16,
                         .k_cache = s.k[size_t(i)],
                         .v_cache = s.v[size_t(i)],
                         .T = T,
                         .pos0 = pos0,
                         .heads = c.n_heads,
                         .kv_heads = c.n_kv_heads,
                         .capacity = s.capacity,
                         .out = b.o,
                         .work = b.flash_work,
                         .work_floats = b.flash_floats};
      check(attn_flash(fa, st), "prefill attention");
      mark(PrefillPhase::attention, "flash");
      stage({.x = b.o,
             .T = T,
             .K = c.n_heads * kHeadDim,
             .mode = StageMode::gate,
             .gate = b.proj,
             .gate_ld = ld},
            PrefillPhase::attention, "attn_stage");
      dense(L.o, GemmOut::add, b.h, D, "o_proj");
    }
    // MoE: routing on the device, the grouped GEMMs over the upper bound of tiles.
    stage({.x = b.h, .T = T, .K = D, .mode = StageMode::norm, .norm = L.post_norm, .out32 = b.a32},
          PrefillPhase::other, "stage");
    const int parts = router_parts(T, L.router.rows, L.router.cols);
    check(router_logits(L.router, b.a32, T, parts, b.rlogits, st), "prefill router");
    mark(PrefillPhase::other, "router");
    const RouteArgs ra{.logits = b.rlogits,
                       .T = T,
                       .E = E,
                       .top_k = c.top_k,
                       .parts = parts,
                       .counts = b.counts,
                       .offsets = b.offsets,
                       .cursor = b.cursor,
                       .ids = b.ids,
                       .wts = b.wts,
                       .slot_row = b.slot_row,
                       .slot_w = b.slot_w,
                       .token_slot = b.token_slot,
                       .map = b.map,
                       .map_count = b.map_count,
                       .bn = moe_bn};
    check(route_tokens(ra, st), "prefill routing");
    mark(PrefillPhase::other, "route");
    const int tiles = route_max_tiles(T, E, c.top_k, moe_bn);
    GemmArgs up;
    up.W = L.gate_up, up.group_rows = 2 * I, up.pair = L.gate_up.tiles != nullptr ? 0 : I;
    up.x = b.x16, up.xrow = b.slot_row, up.xscale = b.xscale, up.map = b.map;
    up.map_count = b.map_count, up.max_tiles = tiles, up.out = GemmOut::swiglu, up.act = b.act;
    up.bn = moe_bn, up.bm = moe_bm;
    check(prefill_gemm(up, st), "prefill experts gate/up");
    mark(PrefillPhase::moe_gemm, "gate_up");
    GemmArgs down;
    down.W = L.down, down.group_rows = D, down.x = b.act, down.map = b.map;
    down.map_count = b.map_count, down.max_tiles = tiles, down.out = GemmOut::weighted;
    down.y16 = b.y16, down.ldy = D, down.row_w = b.slot_w, down.bn = moe_bn;
    down.bm = moe_bm;
    check(prefill_gemm(down, st), "prefill experts down");
    mark(PrefillPhase::moe_gemm, "down");
    check(moe_combine(b.y16, b.token_slot, T, K1, D, b.h, st), "prefill combine");
    mark(PrefillPhase::other, "combine");
  }
  s.length_ += T;
  if (logits == nullptr) return;
  const size_t V = size_t(c.vocab);
  if (which == Logits::last) {
    check(gemv({.W = W.lm_head,
                .x = b.h + size_t(T - 1) * D,
                .norm = W.final_norm,
                .eps = c.rms_eps,
                .y = logits_},
               st),
          "lm_head");
    check(cudaMemcpyAsync(logits, logits_, V * sizeof(float), cudaMemcpyDeviceToHost, st),
          "logits");
    mark(PrefillPhase::other, "lm_head");
    return;
  }
  for (int r0 = 0; r0 < T; r0 += PrefillBuffers::kLogitRows) {
    const int n = std::min(PrefillBuffers::kLogitRows, T - r0);
    stage(
        {.x = b.h + size_t(r0) * D, .T = n, .K = D, .mode = StageMode::norm, .norm = W.final_norm},
        PrefillPhase::other, "stage");
    GemmArgs g;
    g.W = W.lm_head, g.group_rows = W.lm_head.rows, g.x = b.x16, g.xscale = b.xscale, g.n = n;
    g.out = GemmOut::store, g.y = b.lbuf, g.ldy = c.vocab, g.bn = n <= 64 ? 64 : 128;
    g.bm = popt_.gemm_bm != 0 ? popt_.gemm_bm : 256;
    check(prefill_gemm(g, st), "prefill lm_head");
    check(cudaMemcpyAsync(logits + size_t(r0) * V, b.lbuf, size_t(n) * V * sizeof(float),
                          cudaMemcpyDeviceToHost, st),
          "logits");
  }
  check(cudaStreamSynchronize(st), "logits");  // the piece buffer is reused
  mark(PrefillPhase::other, "lm_head");
}

}  // namespace tern::cuda
