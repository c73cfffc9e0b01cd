#include "backends/cuda/decode_step.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>
#include <variant>

#include "backends/cuda/check.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/rows.h"
#include "core/error.h"

namespace tern::cuda {

// What one layer's launches take: its weights and its state in the sequence;
// for attention the step's position, the cache's capacity and the split tier;
// the router logits the GEMV that finishes h feeds (null: the router runs on
// its own) and the other feed, which this layer zeroes for the next; the next
// layer's in-projection tiles, which come into L2 during down.
struct DecodeStep::Layer {
  const DevLayer& w;
  LayerState state;
  const int* pos = nullptr;
  int capacity = 0, splits = 0;
  unsigned long long* fed = nullptr;
  unsigned long long* spent = nullptr;
  L2Ahead next = {};
};

void StepGraph::reset() {
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  exec = nullptr;
}

DecodeStep::DecodeStep(const DeviceWeights& w, cudaStream_t st) : w_(w), st_(st) {
  const ModelConfig& c = w.cfg;
  const size_t proj = std::max(size_t(c.conv_channels() + c.lin_value_dim() + 2 * c.lin_v_heads),
                               size_t(2 * c.n_heads + 2 * c.n_kv_heads) * kHeadDim);
  h_ = buf(size_t(c.hidden));
  a_ = buf(size_t(c.hidden));
  proj_ = buf(proj);
  convout_ = buf(size_t(c.conv_channels()));
  gdn_y_ = buf(size_t(c.lin_value_dim()));
  part_ = buf(size_t(c.n_heads) * kMaxAttnSplits * (kHeadDim + 2));
  attn_ = buf(size_t(c.n_heads) * kHeadDim);
  rlogits_ = buf(size_t(c.n_experts + 1));
  // Two feeds of kFeedCopies u64 logits (two floats each), alternating by layer.
  feed_ = reinterpret_cast<unsigned long long*>(buf(4 * size_t(kFeedCopies) * (c.n_experts + 1)));
  wts_ = buf(kMaxTopK + 1);
  act_ = buf(size_t(kMaxTopK + 1) * c.moe_inter);
  logits_ = buf(size_t(c.vocab));
  amax_ = buf(2 * 1024);
  ids_ = reinterpret_cast<int*>(buf(kMaxTopK));
  counters_ = reinterpret_cast<unsigned*>(buf(2));
  sample_scratch_ = buf((sample_scratch_bytes(c.vocab) + 3) / 4);
  // The GEMV that finishes h feeds the router where the shapes allow, into the
  // two feeds in turn (each launch zeroes the other); an even number of fed
  // layers a step, so the turns carry over to the next step.
  std::vector<int> feeding;
  for (int i = 0; i < c.n_layers; ++i) {
    const DevLayer& L = w.layers[size_t(i)];
    const DMat& producer = L.type == LayerType::linear_attention ? L.out : L.o;
    if (router_fed(producer, router_args(L), up_args(L))) feeding.push_back(i);
  }
  if (feeding.size() % 2 == 1) feeding.pop_back();
  feed_turn_.assign(size_t(c.n_layers), -1);
  for (size_t k = 0; k < feeding.size(); ++k) feed_turn_[size_t(feeding[k])] = int(k % 2);
}

DecodeStep::~DecodeStep() {
  for (void* p : bufs_) cudaFree(p);
}

float* DecodeStep::buf(size_t n) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)), "cudaMalloc of scratch");
  check(cudaMemsetAsync(p, 0, std::max<size_t>(n, 1) * sizeof(float), st_), "memset");
  bufs_.push_back(p);
  return static_cast<float*>(p);
}

RouterArgs DecodeStep::router_args(const DevLayer& L) const {
  const ModelConfig& c = w_.cfg;
  return RouterArgs{L.router, h_,        L.post_norm, c.rms_eps, a_,
                    rlogits_, counters_, ids_,        wts_,      c.top_k};
}

ExpertsUpArgs DecodeStep::up_args(const DevLayer& L) const {
  const ModelConfig& c = w_.cfg;
  return ExpertsUpArgs{L.gate_up, a_, ids_, act_, c.n_experts, c.top_k, c.moe_inter};
}

int capture_graph(cudaStream_t st, cudaGraphExec_t& exec, const std::function<void()>& enqueue) {
  cudaGraph_t g = nullptr;
  check(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "capture");
  try {
    enqueue();
  } catch (...) {  // end the capture, or the stream stays unusable
    if (cudaStreamEndCapture(st, &g) == cudaSuccess && g != nullptr) cudaGraphDestroy(g);
    throw;
  }
  check(cudaStreamEndCapture(st, &g), "capture");
  size_t nodes = 0;
  cudaError_t e = cudaGraphGetNodes(g, nullptr, &nodes);
  if (e == cudaSuccess && exec != nullptr) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(exec, g, &info) != cudaSuccess) {
      (void)cudaGetLastError();  // the failed update's error is not the stream's
      cudaGraphExecDestroy(exec);
      exec = nullptr;
    }
  }
  if (e == cudaSuccess && exec == nullptr) e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  check(e, "graph instantiate");
  return int(nodes);
}

// The step graph for the next position (re-captured when the split tier moves).
StepGraph& DecodeStep::graph(CudaSequence& s, StepChoice choice) {
  const int splits = attn_splits(s.length() + 1, w_.cfg.n_kv_heads);
  StepGraph& sg = s.graphs[int(choice)];
  if (sg.exec != nullptr && sg.splits == splits) return sg;
  sg.splits = splits;
  sg.kernels = capture_graph(st_, sg.exec, [&] { enqueue(s, choice, splits); });
  return sg;
}

namespace {

// A launch of one row, or of all rows (rows.h).
cudaError_t run(const EmbedArgs& a, cudaStream_t st) {
  return embed(a.E, a.token, a.h, st);
}
cudaError_t run(const GemvArgs& a, cudaStream_t st) {
  return gemv(a, st);
}
cudaError_t run(const GdnStepArgs& a, cudaStream_t st) {
  return gdn_step(a, st);
}
cudaError_t run(const AttnDecodeArgs& a, cudaStream_t st) {
  return attn_decode(a, st);
}
cudaError_t run(const RouteUp& a, cudaStream_t st) {
  return route_experts_up(a.r, a.u, st);
}
cudaError_t run(const ExpertsDownArgs& a, cudaStream_t st) {
  return experts_down(a, st);
}
cudaError_t run_rows(const std::vector<EmbedArgs>& a, cudaStream_t st) {
  return embed_each(a.data(), int(a.size()), st);
}
cudaError_t run_rows(const std::vector<GemvArgs>& a, cudaStream_t st) {
  return gemv_rows(a.data(), int(a.size()), st);
}
cudaError_t run_rows(const std::vector<GdnStepArgs>& a, cudaStream_t st) {
  return gdn_step_rows(a.data(), int(a.size()), st);
}
cudaError_t run_rows(const std::vector<AttnDecodeArgs>& a, cudaStream_t st) {
  return attn_decode_rows(a.data(), int(a.size()), st);
}
cudaError_t run_rows(const std::vector<RouteUp>& a, cudaStream_t st) {
  std::vector<RouterArgs> r;
  std::vector<ExpertsUpArgs> u;
  for (const RouteUp& x : a) r.push_back(x.r), u.push_back(x.u);
  return route_experts_up_rows(r.data(), u.data(), int(a.size()), st);
}
cudaError_t run_rows(const std::vector<ExpertsDownArgs>& a, cudaStream_t st) {
  return experts_down_rows(a.data(), int(a.size()), st);
}

// Launch k of every row's plan, as one launch over the rows.
template <typename A>
cudaError_t run_rows_at(const std::vector<std::vector<StepLaunch>>& plans, size_t k,
                        cudaStream_t st) {
  std::vector<A> args;
  for (const auto& p : plans) args.push_back(std::get<A>(p[k].args));
  return run_rows(args, st);
}

}  // namespace

// The step's launches in the order of the reference's forward
// (reference_backend.cpp) for one token, then the choice.
void DecodeStep::enqueue(CudaSequence& s, StepChoice choice, int splits) {
  for (const StepLaunch& l : plan(s, splits))
    check(std::visit([&](const auto& a) { return run(a, st_); }, l.args), l.what);
  if (choice != StepChoice::none) enqueue_choice(s, choice == StepChoice::sampler);
}

void DecodeStep::enqueue_rows(std::span<const StepRowOn> rows, cudaStream_t st) {
  std::vector<std::vector<StepLaunch>> plans;
  for (const StepRowOn& r : rows) plans.push_back(r.lane->plan(*r.seq, r.splits));
  for (const auto& p : plans)
    if (p.size() != plans[0].size()) fail("the rows' steps differ in their launches");
  for (size_t k = 0; k < plans[0].size(); ++k) {
    const StepLaunch& l = plans[0][k];
    const cudaError_t e = std::visit(
        [&](const auto& a) { return run_rows_at<std::decay_t<decltype(a)>>(plans, k, st); },
        l.args);
    check(e, l.what);
  }
  std::vector<ArgmaxArgs> am;
  std::vector<SampleArgs> sa;
  for (const StepRowOn& r : rows) {
    if (r.choice == StepChoice::argmax) am.push_back(r.lane->argmax_args(*r.seq));
    if (r.choice == StepChoice::sampler) sa.push_back(r.lane->sample_args(*r.seq));
  }
  if (!am.empty()) check(argmax_advance_rows(am.data(), int(am.size()), st), "argmax");
  if (!sa.empty()) check(sample_advance_rows(sa.data(), int(sa.size()), st), "sampler");
}

// The norms launch nothing of their own: the input norm is the
// in-projection's prologue, the post-attention norm the router's (fed by the
// GEMV before), the final norm lm_head's. Kernels that tern bench leaves out
// are not in the plan.
std::vector<StepLaunch> DecodeStep::plan(const CudaSequence& s, int splits) const {
  const ModelConfig& c = w_.cfg;
  std::vector<StepLaunch> out;
  out.push_back({"embed", EmbedArgs{w_.embed, &s.scalars->token, h_}});
  for (int i = 0; i < c.n_layers; ++i) {
    const Layer l = layer(s, i, splits);
    if (l.w.type == LayerType::linear_attention)
      gdn_forward(l, out);
    else
      attention_forward(l, out);
    moe_forward(l, out);
  }
  out.push_back(
      {"lm_head",
       GemvArgs{.W = w_.lm_head, .x = h_, .norm = w_.final_norm, .eps = c.rms_eps, .y = logits_}});
  std::erase_if(out, [&](const StepLaunch& l) { return left_out.contains(l.what); });
  return out;
}

DecodeStep::Layer DecodeStep::layer(const CudaSequence& s, int i, int splits) const {
  const ModelConfig& c = w_.cfg;
  const size_t feed_words = size_t(kFeedCopies) * (c.n_experts + 1);
  const int turn = feed_turn_[size_t(i)];
  Layer l{.w = w_.layers[size_t(i)],
          .state = s.layer(i),
          .pos = &s.scalars->pos,
          .capacity = s.capacity,
          .splits = splits};
  if (turn >= 0) {
    l.fed = feed_ + size_t(turn) * feed_words;
    l.spent = feed_ + size_t(1 - turn) * feed_words;
  }
  // The next layer's in-projection tiles that its blocks copy after staging
  // come into L2 during down, whose own weights are few (+1.3% at 4K; from
  // route_up, which competes with its experts' copies: -1.7%).
  if (i + 1 < c.n_layers) {
    const DevLayer& N = w_.layers[size_t(i + 1)];
    l.next = gemv_ahead(N.type == LayerType::linear_attention ? N.in_proj : N.qkv);
  }
  return l;
}

// The Gated DeltaNet mixer (model::gdn_forward): the input norm and the
// in-projection, the causal conv in its epilogue; the delta rule step; the
// gated RMSNorm (per value head, times silu(z), which the in-projection
// stored) in out_proj's staging, out_proj adding into h and feeding the router.
void DecodeStep::gdn_forward(const Layer& l, std::vector<StepLaunch>& out) const {
  const ModelConfig& c = w_.cfg;
  const DevLayer& L = l.w;
  const int C = c.conv_channels(), Vd = c.lin_value_dim(), Hv = c.lin_v_heads;
  const GemvArgs in{.W = L.in_proj,
                    .x = h_,
                    .norm = L.in_norm,
                    .eps = c.rms_eps,
                    .y = proj_,
                    .out = GemvOut::conv,
                    .conv = {L.conv, l.state.conv, convout_, C, c.conv_kernel, Vd}};
  out.push_back({"gdn_in", in});
  const GdnStepArgs g{convout_,  proj_ + C + Vd, proj_ + C + Vd + Hv, L.a_log, L.dt_bias,
                      l.state.S, gdn_y_,         c.lin_k_heads,       Hv};
  out.push_back({"gdn_step", g});
  const GemvArgs o{.W = L.out,
                   .x = gdn_y_,
                   .norm = L.gnorm,
                   .eps = c.rms_eps,
                   .y = h_,
                   .out = GemvOut::add,
                   .feed = {L.router, L.post_norm, l.fed},
                   .norm_group = kGdnDim,
                   .gate = proj_ + C};
  out.push_back({"gdn_out", o});
}

// The gated attention mixer (model::attention_forward): the input norm and the
// qkv projection; the q/k norms, RoPE and the KV append fused into split-K
// attention and its combine with the output gate; o_proj adding into h and
// feeding the router.
void DecodeStep::attention_forward(const Layer& l, std::vector<StepLaunch>& out) const {
  const ModelConfig& c = w_.cfg;
  const DevLayer& L = l.w;
  out.push_back(
      {"qkv", GemvArgs{.W = L.qkv, .x = h_, .norm = L.in_norm, .eps = c.rms_eps, .y = proj_}});
  const AttnDecodeArgs d{.qkv = proj_,
                         .q_norm = L.q_norm,
                         .k_norm = L.k_norm,
                         .eps = c.rms_eps,
                         .k_cache = l.state.k,
                         .v_cache = l.state.v,
                         .pos = l.pos,
                         .part = part_,
                         .out = attn_,
                         .heads = c.n_heads,
                         .kv_heads = c.n_kv_heads,
                         .rotary = c.rotary_dim,
                         .capacity = l.capacity,
                         .splits = l.splits,
                         .inv_freq = w_.rope_inv_freq};
  out.push_back({"attention", d});
  const RouterFeed feed{L.router, L.post_norm, l.fed};
  out.push_back(
      {"o_proj", GemvArgs{.W = L.o, .x = attn_, .y = h_, .out = GemvOut::add, .feed = feed}});
}

// The MoE (model::moe_forward): the post-attention norm and the routing (from
// the fed logits, or a router launch) with the experts' gate/up; down, the
// routing weights and the gated shared expert adding into h.
void DecodeStep::moe_forward(const Layer& l, std::vector<StepLaunch>& out) const {
  const ModelConfig& c = w_.cfg;
  RouterArgs r = router_args(l.w);
  r.fed = l.fed, r.spent = l.spent;
  out.push_back({"route_up", RouteUp{r, up_args(l.w)}});
  out.push_back(
      {"down", ExpertsDownArgs{l.w.down, act_, ids_, wts_, h_, c.n_experts, c.top_k, l.next}});
}

ArgmaxArgs DecodeStep::argmax_args(CudaSequence& s) const {
  StepScalars* d = s.scalars;
  return {
      logits_,  w_.cfg.vocab, amax_, counters_ + 1, &d->token, s.out, CudaSequence::kOutRing - 1,
      &d->step, &d->pos};
}

SampleArgs DecodeStep::sample_args(CudaSequence& s) const {
  StepScalars* d = s.scalars;
  return {logits_,         w_.cfg.vocab, s.rules, s.counts,
          sample_scratch_, &d->token,    s.out,   CudaSequence::kOutRing - 1,
          &d->step,        &d->pos};
}

void DecodeStep::enqueue_choice(CudaSequence& s, bool sampled) {
  if (sampled)
    check(sample_advance(sample_args(s), st_), "sampler");
  else
    check(argmax_advance(argmax_args(s), st_), "argmax");
}

}  // namespace tern::cuda
