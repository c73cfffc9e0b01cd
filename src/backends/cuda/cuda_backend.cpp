#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/attention.h"
#include "backends/cuda/check.h"
#include "backends/cuda/gdn.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/leave_out.h"
#include "backends/cuda/misc.h"
#include "backends/cuda/moe.h"
#include "backends/cuda/prefill_buffers.h"
#include "backends/cuda/sample.h"
#include "backends/cuda/snapshot_pool.h"
#include "core/error.h"

namespace tern::cuda {

namespace {
constexpr int kInitialCapacity = 4096;
enum Slot { kPos = 0, kToken = 1, kStep = 2, kSavedStep = 3 };

// Seconds the work enqueued by enqueue() takes on stream st (CUDA events).
template <typename F>
double event_seconds(cudaStream_t st, F&& enqueue) {
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  check(cudaEventRecord(e0, st), "event");
  enqueue();
  check(cudaEventRecord(e1, st), "event");
  check(cudaEventSynchronize(e1), "event");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, e0, e1), "event");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return double(ms) / 1e3;
}
}  // namespace

void StepGraph::reset() {
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  exec = nullptr;
}

CudaSequence::~CudaSequence() {
  for (StepGraph& g : graphs) g.reset();
  for (auto* p : k) cudaFree(p);
  for (auto* p : v) cudaFree(p);
  for (auto* p : S) cudaFree(p);
  for (auto* p : conv) cudaFree(p);
  cudaFree(ints);
  cudaFree(out);
  cudaFree(counts);
  cudaFree(rules);
}

CudaBackend::CudaBackend(std::shared_ptr<const ModelWeights> w) : w_(DeviceWeights::upload(*w)) {
  init();
}

CudaBackend::CudaBackend(std::unique_ptr<DeviceWeights> w) : w_(std::move(w)) {
  init();
}

CudaBackend::~CudaBackend() {
  for (void* p : bufs_) cudaFree(p);
  cudaFreeHost(ids_out_);
  cudaFreeHost(logits_out_);
  cudaFreeHost(mask_host_);
  cudaFree(mask_dev_);
  for (cudaEvent_t e : id_ready_) cudaEventDestroy(e);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

float* CudaBackend::buf(size_t n) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)), "cudaMalloc of scratch");
  check(cudaMemsetAsync(p, 0, std::max<size_t>(n, 1) * sizeof(float), stream_), "memset");
  bufs_.push_back(p);
  return static_cast<float*>(p);
}

void CudaBackend::init() {
  const ModelConfig& c = w_->cfg;
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
  snapshots_ = std::make_shared<SnapshotPool>();
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
  check(cudaMallocHost(&ids_out_, 2 * sizeof(int)), "pinned ids");
  for (cudaEvent_t& e : id_ready_)
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
  check(cudaStreamSynchronize(stream_), "scratch");
}

std::unique_ptr<Sequence> CudaBackend::new_sequence() {
  const ModelConfig& c = w_->cfg;
  auto s = std::make_unique<CudaSequence>();
  s->k.assign(size_t(c.n_layers), nullptr);
  s->v.assign(size_t(c.n_layers), nullptr);
  s->S.assign(size_t(c.n_layers), nullptr);
  s->conv.assign(size_t(c.n_layers), nullptr);
  for (int i = 0; i < c.n_layers; ++i) {
    if (c.layer_types[size_t(i)] != LayerType::linear_attention) continue;
    const size_t nS = size_t(c.lin_v_heads) * kGdnDim * kGdnDim;
    const size_t nc = size_t(c.conv_kernel - 1) * c.conv_channels();
    check(cudaMalloc(&s->S[size_t(i)], nS * sizeof(float)), "state");
    check(cudaMalloc(&s->conv[size_t(i)], nc * sizeof(float)), "conv state");
    check(cudaMemsetAsync(s->S[size_t(i)], 0, nS * sizeof(float), stream_), "state");
    check(cudaMemsetAsync(s->conv[size_t(i)], 0, nc * sizeof(float), stream_), "conv state");
  }
  check(cudaMalloc(&s->ints, 4 * sizeof(int)), "ints");
  check(cudaMemsetAsync(s->ints, 0, 4 * sizeof(int), stream_), "ints");
  check(cudaMalloc(&s->out, kOutRing * sizeof(int)), "out");
  reserve(*s, std::min(kInitialCapacity, c.max_positions));
  return s;
}

void CudaBackend::reserve(CudaSequence& s, int64_t n) {
  const ModelConfig& c = w_->cfg;
  if (n <= s.capacity) return;
  if (n > c.max_positions)
    fail("sequence of {} tokens exceeds the model's {} positions", n, c.max_positions);
  check(cudaStreamSynchronize(stream_), "reserve");  // queued steps still use the old cache
  int cap = std::max(s.capacity, 1);
  while (cap < n) cap *= 2;
  cap = std::min(cap, c.max_positions);
  cap = (cap + kKvChunk - 1) / kKvChunk * kKvChunk;  // whole chunks (layout.h)
  const size_t row = kHeadDim * sizeof(uint16_t);
  const size_t used = size_t(s.length() + kKvChunk - 1) / kKvChunk * kKvChunk;
  std::vector<uint16_t*> old_caches;
  for (int i = 0; i < c.n_layers; ++i) {
    if (c.layer_types[size_t(i)] == LayerType::linear_attention) continue;
    for (auto* cache : {&s.k, &s.v}) {
      uint16_t* p = nullptr;
      const size_t bytes = size_t(c.n_kv_heads) * cap * row;
      check(cudaMalloc(&p, bytes), "KV cache");
      // Zeroed: the attention reads whole chunks, and the masked rows past
      // the context must be finite (0 x NaN is NaN).
      check(cudaMemsetAsync(p, 0, bytes, stream_), "KV cache");
      uint16_t*& old = (*cache)[size_t(i)];
      if (old != nullptr) {
        check(cudaMemcpy2DAsync(p, size_t(cap) * row, old, size_t(s.capacity) * row, used * row,
                                size_t(c.n_kv_heads), cudaMemcpyDeviceToDevice, stream_),
              "KV grow");
        old_caches.push_back(old);
      }
      old = p;
    }
  }
  check(cudaStreamSynchronize(stream_), "KV grow");  // the copies are done with the old caches
  for (uint16_t* p : old_caches) cudaFree(p);
  s.capacity = cap;
  for (StepGraph& g : s.graphs) g.reset();
}

void CudaBackend::enqueue_step(CudaSequence& s, StepChoice choice) {
  const ModelConfig& c = w_->cfg;
  const DeviceWeights& W = *w_;
  cudaStream_t st = stream_;
  int* pos = s.ints + kPos;
  // Launches the kernel(s) named `what` unless the bench leaves them out.
  auto launch = [&](const char* what, auto&& enqueue) {
    if (left_out_.count(what) == 0) check(enqueue(), what);
  };
  launch("embed", [&] { return embed(W.embed, s.ints + kToken, h_, st); });
  // A layer's routing and gate/up arguments (unfed).
  auto router_args = [&](const DevLayer& L) {
    return RouterArgs{L.router, h_,        L.post_norm, c.rms_eps, a_,
                      rlogits_, counters_, ids_,        wts_,      c.top_k};
  };
  auto up_args = [&](const DevLayer& L) {
    return ExpertsUpArgs{L.gate_up, a_, ids_, act_, c.n_experts, c.top_k, c.moe_inter};
  };
  // The GEMV that finishes h feeds the router where the shapes allow, into the
  // two feeds in turn (each launch zeroes the other); an even number of fed
  // layers a step, so the turns carry over to the next step.
  std::vector<int> feeding;
  for (int i = 0; i < c.n_layers; ++i) {
    const DevLayer& L = W.layers[size_t(i)];
    const DMat& producer = L.type == LayerType::linear_attention ? L.out : L.o;
    if (router_fed(producer, router_args(L), up_args(L))) feeding.push_back(i);
  }
  if (feeding.size() % 2 == 1) feeding.pop_back();
  const size_t feed_words = size_t(kFeedCopies) * (c.n_experts + 1);
  // The next layer's in-projection tiles that its blocks copy after staging
  // come into L2 during down, whose own weights are few (+1.3% at 4K; from
  // route_up, which competes with its experts' copies: -1.7%).
  auto in_proj = [&](int i) {
    if (i >= c.n_layers) return L2Ahead{};
    const DevLayer& L = W.layers[size_t(i)];
    return gemv_ahead(L.type == LayerType::linear_attention ? L.in_proj : L.qkv);
  };
  for (int i = 0; i < c.n_layers; ++i) {
    const DevLayer& L = W.layers[size_t(i)];
    const bool linear = L.type == LayerType::linear_attention;
    RouterArgs r = router_args(L);
    const ExpertsUpArgs up = up_args(L);
    const L2Ahead next = in_proj(i + 1);
    if (const auto k = std::find(feeding.begin(), feeding.end(), i); k != feeding.end()) {
      const size_t turn = size_t(k - feeding.begin()) % 2;
      r.fed = feed_ + turn * feed_words;
      r.spent = feed_ + (1 - turn) * feed_words;
    }
    const RouterFeed feed{L.router, L.post_norm, r.fed};
    if (linear) {
      const int C = c.conv_channels(), Vd = c.lin_value_dim(), Hv = c.lin_v_heads;
      const GemvArgs in{.W = L.in_proj,
                        .x = h_,
                        .norm = L.in_norm,
                        .eps = c.rms_eps,
                        .y = proj_,
                        .out = GemvOut::conv,
                        .conv = {L.conv, s.conv[size_t(i)], convout_, C, c.conv_kernel, Vd}};
      launch("gdn_in", [&] { return gemv(in, st); });
      const GdnStepArgs g{convout_,       proj_ + C + Vd, proj_ + C + Vd + Hv, L.a_log, L.dt_bias,
                          s.S[size_t(i)], gdn_y_,         c.lin_k_heads,       Hv};
      launch("gdn_step", [&] { return gdn_step(g, st); });
      // The gated RMSNorm (per value head, times silu(z), which the in-projection
      // stored) in out_proj's staging.
      const GemvArgs out{.W = L.out,
                         .x = gdn_y_,
                         .norm = L.gnorm,
                         .eps = c.rms_eps,
                         .y = h_,
                         .out = GemvOut::add,
                         .feed = feed,
                         .norm_group = kGdnDim,
                         .gate = proj_ + C};
      launch("gdn_out", [&] { return gemv(out, st); });
    } else {
      launch("qkv", [&] {
        return gemv({.W = L.qkv, .x = h_, .norm = L.in_norm, .eps = c.rms_eps, .y = proj_}, st);
      });
      const AttnDecodeArgs d{.qkv = proj_,
                             .q_norm = L.q_norm,
                             .k_norm = L.k_norm,
                             .eps = c.rms_eps,
                             .k_cache = s.k[size_t(i)],
                             .v_cache = s.v[size_t(i)],
                             .pos = pos,
                             .part = part_,
                             .out = attn_,
                             .heads = c.n_heads,
                             .kv_heads = c.n_kv_heads,
                             .rotary = c.rotary_dim,
                             .capacity = s.capacity,
                             .splits = s.splits,
                             .inv_freq = W.rope_inv_freq};
      launch("attention", [&] { return attn_decode(d, st); });
      launch("o_proj", [&] {
        return gemv({.W = L.o, .x = attn_, .y = h_, .out = GemvOut::add, .feed = feed}, st);
      });
    }
    launch("route_up", [&] { return route_experts_up(r, up, st); });
    launch("down", [&] {
      return experts_down(ExpertsDownArgs{L.down, act_, ids_, wts_, h_, c.n_experts, c.top_k, next},
                          st);
    });
  }
  launch("lm_head", [&] {
    return gemv({.W = W.lm_head, .x = h_, .norm = W.final_norm, .eps = c.rms_eps, .y = logits_},
                st);
  });
  if (choice != StepChoice::none) enqueue_choice(s, choice == StepChoice::sampler);
}

void CudaBackend::enqueue_choice(CudaSequence& s, bool sampled) {
  const int V = w_->cfg.vocab;
  int* pos = s.ints + kPos;
  if (sampled) {
    SampleArgs sa{logits_,         V,     s.rules,      s.counts,       sample_scratch_,
                  s.ints + kToken, s.out, kOutRing - 1, s.ints + kStep, pos};
    check(sample_advance(sa, stream_), "sampler");
  } else {
    ArgmaxArgs am{logits_,        V,  amax_, counters_ + 1, s.ints + kToken, s.out, kOutRing - 1,
                  s.ints + kStep, pos};
    check(argmax_advance(am, stream_), "argmax");
  }
}

void CudaBackend::leave_out(const std::set<std::string>& names) {
  check_step_kernel_names(names);
  left_out_ = names;
}

// The step graph for the next position (re-captured when the split tier moves).
StepGraph& CudaBackend::ensure_graph(CudaSequence& s, StepChoice choice) {
  reserve(s, s.length() + 1);
  const int splits = attn_splits(s.length() + 1, w_->cfg.n_kv_heads);
  StepGraph& sg = s.graphs[int(choice)];
  if (sg.exec != nullptr && sg.splits == splits) return sg;
  sg.reset();
  sg.splits = splits;
  s.splits = splits;
  cudaGraph_t g = nullptr;
  check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "capture");
  try {
    enqueue_step(s, choice);
  } catch (...) {  // end the capture, or the stream stays unusable
    if (cudaStreamEndCapture(stream_, &g) == cudaSuccess && g != nullptr) cudaGraphDestroy(g);
    throw;
  }
  check(cudaStreamEndCapture(stream_, &g), "capture");
  size_t nodes = 0;
  check(cudaGraphGetNodes(g, nullptr, &nodes), "graph nodes");
  sg.kernels = int(nodes);
  const cudaError_t e = cudaGraphInstantiate(&sg.exec, g, 0);
  cudaGraphDestroy(g);
  check(e, "graph instantiate");
  return sg;
}

// One step through the captured graph.
void CudaBackend::run_step(CudaSequence& s, StepChoice choice) {
  check(cudaGraphLaunch(ensure_graph(s, choice).exec, stream_), "graph launch");
  s.length_ += 1;
}

// The decode step graph token by token (calls of fewer than step_below tokens).
void CudaBackend::forward_steps(CudaSequence& s, std::span<const int32_t> tokens, Logits which,
                                std::vector<float>& logits) {
  const ModelConfig& c = w_->cfg;
  const int64_t T = int64_t(tokens.size());
  // The arg-max step advances the draw counter: kept aside for the completion.
  check(cudaMemcpyAsync(s.ints + kSavedStep, s.ints + kStep, sizeof(int), cudaMemcpyDeviceToDevice,
                        stream_),
        "step");
  for (int64_t t = 0; t < T; ++t) {
    check(cudaMemcpyAsync(s.ints + kToken, &tokens[size_t(t)], sizeof(int), cudaMemcpyHostToDevice,
                          stream_),
          "token");
    run_step(s, StepChoice::argmax);
    if (which == Logits::all || (which == Logits::last && t == T - 1)) {
      float* dst = logits.data() + (which == Logits::all ? size_t(t) * c.vocab : 0);
      check(cudaMemcpyAsync(dst, logits_, size_t(c.vocab) * sizeof(float), cudaMemcpyDeviceToHost,
                            stream_),
            "logits");
    }
  }
  check(cudaMemcpyAsync(s.ints + kStep, s.ints + kSavedStep, sizeof(int), cudaMemcpyDeviceToDevice,
                        stream_),
        "step");
  check(cudaStreamSynchronize(stream_), "forward");
}

void CudaBackend::start_sampling(Sequence& seq, const SamplingParams& p,
                                 std::span<const int32_t> history) {
  auto& s = dynamic_cast<CudaSequence&>(seq);
  const int V = w_->cfg.vocab;
  check_history(s, history);
  const SampleRules rules = sample_rules(p);
  s.sampled = !p.greedy();
  s.sampler.reset();  // the state is the device's
  s.draws = 0;
  static const int zero = 0;
  check(cudaMemcpyAsync(s.ints + kStep, &zero, sizeof(int), cudaMemcpyHostToDevice, stream_),
        "draw counter");
  if (s.sampled) {
    std::vector<int32_t> counts(size_t(V), 0);
    for (int32_t t : history) counts[size_t(t)]++;
    if (s.counts == nullptr) {
      check(cudaMalloc(&s.counts, size_t(V) * sizeof(int)), "token counts");
      check(cudaMalloc(&s.rules, sizeof(SampleRules)), "sampling rules");
    }
    check(cudaMemcpyAsync(s.counts, counts.data(), counts.size() * sizeof(int),
                          cudaMemcpyHostToDevice, stream_),
          "token counts");
    check(cudaMemcpyAsync(s.rules, &rules, sizeof(rules), cudaMemcpyHostToDevice, stream_),
          "sampling rules");
  }
  // Pageable sources are staged when the call returns; the sync keeps the
  // counts' host vector alive until the copy is done in any case.
  check(cudaStreamSynchronize(stream_), "start sampling");
}

void CudaBackend::generate(Sequence& seq, int32_t first, int max_tokens,
                           const std::function<bool(int32_t)>& on_token,
                           const GenerateHooks& hooks) {
  auto& s = dynamic_cast<CudaSequence&>(seq);
  const int V = w_->cfg.vocab;
  const size_t words = mask_words(V);
  TokenConstraint* con = hooks.constraint;
  if (hooks.on_logits && logits_out_ == nullptr)
    check(cudaMallocHost(&logits_out_, 2 * size_t(V) * sizeof(float)), "pinned logits");
  if (con && mask_host_ == nullptr) {
    check(cudaMallocHost(&mask_host_, words * sizeof(uint32_t)), "pinned mask");
    check(cudaMalloc(&mask_dev_, words * sizeof(uint32_t)), "mask");
  }
  check_ids(std::span(&first, 1));
  if (max_tokens <= 0) return;
  check(cudaMemcpyAsync(s.ints + kToken, &first, sizeof(int), cudaMemcpyHostToDevice, stream_),
        "token");
  // Step i feeds the token chosen by step i - 1 (already on the device). Its
  // forward is the whole step graph, or under a constraint the graph without
  // the choice, which then follows once the host has the mask.
  auto forward = [&] { run_step(s, con ? StepChoice::none : s.choice()); };
  // The end of step i: the raw logits out when wanted (slot i % 2: step
  // i - 2's, which the host has used), under a constraint the mask (unless
  // free this step; the host rewrites mask_host_ only after the previous id
  // arrived, so after its copy) and the choice, then the chosen id, ring
  // slot draws (the completion's step count: earlier calls continue there).
  auto finish = [&](int i) {
    if (hooks.on_logits)
      check(cudaMemcpyAsync(logits_out_ + size_t(i % 2) * V, logits_, size_t(V) * sizeof(float),
                            cudaMemcpyDeviceToHost, stream_),
            "logits");
    if (con) {
      if (!con->unconstrained()) {
        con->allowed({mask_host_, words});
        check(cudaMemcpyAsync(mask_dev_, mask_host_, words * sizeof(uint32_t),
                              cudaMemcpyHostToDevice, stream_),
              "mask");
        check(mask_logits(logits_, mask_dev_, V, stream_), "mask logits");
      }
      enqueue_choice(s, s.sampled);
    }
    const int64_t slot = s.draws++ & (kOutRing - 1);
    check(cudaMemcpyAsync(ids_out_ + i % 2, s.out + slot, sizeof(int), cudaMemcpyDeviceToHost,
                          stream_),
          "id");
    check(cudaEventRecord(id_ready_[i % 2], stream_), "event");
  };
  forward();
  finish(0);
  for (int i = 0;; ++i) {
    // The GPU stays a step ahead: step i + 1's forward runs while the host
    // takes id i, the caller's callback and (constrained) the next mask.
    if (i + 1 < max_tokens) {
      forward();
      if (!con) finish(i + 1);
    }
    check(cudaEventSynchronize(id_ready_[i % 2]), "id");
    if (hooks.on_logits) hooks.on_logits({logits_out_ + size_t(i % 2) * V, size_t(V)});
    const int32_t id = ids_out_[i % 2];
    if (con) con->accept(id);
    if (!on_token(id) || i + 1 == max_tokens) break;
    if (con) finish(i + 1);
  }
  check(cudaStreamSynchronize(stream_), "generate");
}

int CudaBackend::step_kernels(Sequence& seq) {
  auto& s = dynamic_cast<CudaSequence&>(seq);
  return ensure_graph(s, s.choice()).kernels;
}

void CudaBackend::set_position(CudaSequence& s, int64_t length) {
  const int v = int(length);
  check(cudaMemcpyAsync(s.ints + kPos, &v, sizeof(int), cudaMemcpyHostToDevice, stream_), "pos");
  check(cudaStreamSynchronize(stream_), "pos");  // v is on this frame
  s.length_ = length;
}

void CudaBackend::set_length(Sequence& seq, int64_t length) {
  auto& s = dynamic_cast<CudaSequence&>(seq);
  reserve(s, length + 1);
  set_position(s, length);
}

namespace {

// GDN state on the device, owned (a snapshot): one pool block.
struct CudaState : SequenceState {
  std::vector<float*> S, conv;  // per layer, null for attention layers
  std::shared_ptr<SnapshotPool> pool;
  void* block = nullptr;
  size_t bytes_ = 0;
  ~CudaState() override {
    if (block != nullptr) pool->give(block);
  }
  size_t bytes() const override { return bytes_; }
  void set_length(int64_t n) { length_ = n; }
};

}  // namespace

void CudaBackend::copy_state(const std::vector<float*>& from_S,
                             const std::vector<float*>& from_conv, const std::vector<float*>& to_S,
                             const std::vector<float*>& to_conv) {
  const ModelConfig& c = w_->cfg;
  const size_t nS = size_t(c.lin_v_heads) * kGdnDim * kGdnDim * sizeof(float);
  const size_t nc = size_t(c.conv_kernel - 1) * c.conv_channels() * sizeof(float);
  for (size_t i = 0; i < from_S.size(); ++i) {
    if (from_S[i] == nullptr) continue;
    check(cudaMemcpyAsync(to_S[i], from_S[i], nS, cudaMemcpyDeviceToDevice, stream_), "state");
    check(cudaMemcpyAsync(to_conv[i], from_conv[i], nc, cudaMemcpyDeviceToDevice, stream_),
          "conv state");
  }
}

std::unique_ptr<SequenceState> CudaBackend::save(const Sequence& seq) {
  const auto& s = dynamic_cast<const CudaSequence&>(seq);
  const ModelConfig& c = w_->cfg;
  auto st = std::make_unique<CudaState>();
  st->set_length(s.length());
  st->S.assign(s.S.size(), nullptr);
  st->conv.assign(s.conv.size(), nullptr);
  const size_t nS = size_t(c.lin_v_heads) * kGdnDim * kGdnDim * sizeof(float);
  const size_t nc = size_t(c.conv_kernel - 1) * c.conv_channels() * sizeof(float);
  st->bytes_ = size_t(c.n_linear_layers()) * (nS + nc);
  st->pool = snapshots_;
  st->block = snapshots_->take(std::max<size_t>(st->bytes_, 1));
  auto* at = static_cast<uint8_t*>(st->block);
  for (size_t i = 0; i < s.S.size(); ++i) {
    if (s.S[i] == nullptr) continue;
    st->S[i] = reinterpret_cast<float*>(at);
    st->conv[i] = reinterpret_cast<float*>(at + nS);
    at += nS + nc;
  }
  copy_state(s.S, s.conv, st->S, st->conv);
  check(cudaStreamSynchronize(stream_), "snapshot");
  return st;
}

void CudaBackend::restore(Sequence& seq, const SequenceState& st) {
  auto& s = dynamic_cast<CudaSequence&>(seq);
  const auto& cs = dynamic_cast<const CudaState&>(st);
  TERN_CHECK(cs.length() <= s.length());
  copy_state(cs.S, cs.conv, s.S, s.conv);
  set_position(s, cs.length());
}

std::unique_ptr<Sequence> CudaBackend::fork(const Sequence& seq, const SequenceState& st) {
  const auto& s = dynamic_cast<const CudaSequence&>(seq);
  TERN_CHECK(st.length() <= s.length());
  auto f = new_sequence();
  auto& fs = dynamic_cast<CudaSequence&>(*f);
  reserve(fs, st.length() + 1);
  // The KV chunks in use, whole (layout.h's layout), per KV head.
  const size_t row = kHeadDim * sizeof(uint16_t);
  const size_t used = size_t(st.length() + kKvChunk - 1) / kKvChunk * kKvChunk;
  for (size_t i = 0; i < s.k.size(); ++i) {
    if (s.k[i] == nullptr) continue;
    for (auto [from, to] : {std::pair{s.k[i], fs.k[i]}, std::pair{s.v[i], fs.v[i]}})
      check(cudaMemcpy2DAsync(to, size_t(fs.capacity) * row, from, size_t(s.capacity) * row,
                              used * row, size_t(w_->cfg.n_kv_heads), cudaMemcpyDeviceToDevice,
                              stream_),
            "KV fork");
  }
  fs.length_ = st.length();
  restore(fs, st);
  return f;
}

size_t CudaBackend::sequence_bytes(const Sequence& seq) const {
  const auto& s = dynamic_cast<const CudaSequence&>(seq);
  const ModelConfig& c = w_->cfg;
  const size_t kv = size_t(c.n_full_layers()) * 2 * size_t(c.n_kv_heads) * kHeadDim *
                    sizeof(uint16_t) * size_t(s.capacity);
  const size_t state =
      size_t(c.n_linear_layers()) *
      (size_t(c.lin_v_heads) * kGdnDim * kGdnDim + size_t(c.conv_kernel - 1) * c.conv_channels()) *
      sizeof(float);
  return kv + state;
}

void CudaBackend::fill_synthetic(Sequence& seq, int64_t length, uint64_t seed) {
  auto& s = dynamic_cast<CudaSequence&>(seq);
  const ModelConfig& c = w_->cfg;
  reserve(s, length + 1);
  for (int i = 0; i < c.n_layers; ++i) {
    if (s.k[size_t(i)] != nullptr) {
      const size_t n = size_t(c.n_kv_heads) * s.capacity * kHeadDim;
      check(fill_bf16(s.k[size_t(i)], n, -1.0f, 1.0f, seed + 2 * size_t(i), stream_), "fill");
      check(fill_bf16(s.v[size_t(i)], n, -1.0f, 1.0f, seed + 2 * size_t(i) + 1, stream_), "fill");
    } else {
      const size_t nS = size_t(c.lin_v_heads) * kGdnDim * kGdnDim;
      check(fill_f32(s.S[size_t(i)], nS, -0.01f, 0.01f, seed + 1000 + size_t(i), stream_), "fill");
    }
  }
  check(cudaStreamSynchronize(stream_), "fill");
  set_length(s, length);
}

std::vector<TraceRecord> CudaBackend::trace_steps(Sequence& seq, int n) {
#ifndef TERN_TRACE
  (void)seq, (void)n;
  fail("tern bench --trace needs a tern built with -DTERN_TRACE=ON");
#else
  auto& s = dynamic_cast<CudaSequence&>(seq);
  reserve(s, s.length() + n + 1);
  run_step(s, s.choice());  // capture and warm up untraced
  s.length_ -= 1;
  set_length(s, s.length());
  constexpr unsigned kCapacity = 1u << 18;
  TraceRecord* rec = nullptr;
  unsigned* count = nullptr;
  check(cudaMalloc(&rec, kCapacity * sizeof(TraceRecord)), "trace buffer");
  check(cudaMalloc(&count, sizeof(unsigned)), "trace buffer");
  check(cudaMemsetAsync(count, 0, sizeof(unsigned), stream_), "trace buffer");
  check(cudaStreamSynchronize(stream_), "trace buffer");
  check(trace_bind({rec, count, kCapacity}), "trace bind");
  for (int i = 0; i < n; ++i) run_step(s, s.choice());
  check(cudaStreamSynchronize(stream_), "trace sync");
  check(trace_bind({}), "trace unbind");
  unsigned got = 0;
  check(cudaMemcpy(&got, count, sizeof got, cudaMemcpyDeviceToHost), "trace count");
  std::vector<TraceRecord> out(std::min(got, kCapacity));
  check(cudaMemcpy(out.data(), rec, out.size() * sizeof(TraceRecord), cudaMemcpyDeviceToHost),
        "trace records");
  cudaFree(rec);
  cudaFree(count);
  return out;
#endif
}

#ifdef TERN_TRACE
cudaError_t trace_bind(const TraceSink& s) {
  for (auto bind : {trace_bind_gemv, trace_bind_moe, trace_bind_gdn, trace_bind_attention})
    if (cudaError_t e = bind(s); e != cudaSuccess) return e;
  return cudaSuccess;
}
#endif

double CudaBackend::time_steps(Sequence& seq, int n) {
  auto& s = dynamic_cast<CudaSequence&>(seq);
  reserve(s, s.length() + n + 1);
  run_step(s, s.choice());  // capture outside the timed region
  s.length_ -= 1;
  set_length(s, s.length());
  return event_seconds(stream_, [&] {
    for (int i = 0; i < n; ++i) run_step(s, s.choice());
  });
}

}  // namespace tern::cuda

namespace tern::cuda {

// The best of several timed rounds, after ~0.1 s of copies that let an idle
// GPU's clocks rise: timed from cold, the first copies of a call ran up to 4%
// slower (4.10 against 4.27 TB/s within one call: the sweep and the sampler run of
// bench/results/decode-35b-a3b-dummy-e75a064.json and sample-4096-e75a064.json).
double copy_bandwidth() {
  constexpr size_t kBytes = size_t(1) << 30;
  constexpr int kWarmup = 200, kRounds = 5, kReps = 10;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, kBytes), "copy buffers");
  check(cudaMalloc(&b, kBytes), "copy buffers");
  auto copies = [&](int n) {
    for (int i = 0; i < n; ++i)
      check(cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDeviceToDevice), "copy");
  };
  copies(kWarmup);
  double best = 0;
  for (int r = 0; r < kRounds; ++r)
    best = std::max(best,
                    2.0 * double(kBytes) * kReps / event_seconds(nullptr, [&] { copies(kReps); }));
  cudaFree(a);
  cudaFree(b);
  return best;
}

double launch_overhead(int n) {
  constexpr int kReps = 200;
  cudaStream_t st = nullptr;
  check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "capture");
  check(empty_kernels(n, st), "empty kernels");
  check(cudaStreamEndCapture(st, &g), "capture");
  check(cudaGraphInstantiate(&exec, g, 0), "graph instantiate");
  check(cudaGraphLaunch(exec, st), "graph launch");  // warm-up
  const double secs = event_seconds(st, [&] {
    for (int i = 0; i < kReps; ++i) check(cudaGraphLaunch(exec, st), "graph launch");
  });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(st);
  return secs / kReps;
}

size_t device_memory_used() {
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return total - free;
}

}  // namespace tern::cuda
