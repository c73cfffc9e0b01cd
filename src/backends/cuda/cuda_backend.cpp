#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>

#include "backends/cuda/check.h"
#include "backends/cuda/decode_step.h"
#include "backends/cuda/host_state.h"
#include "backends/cuda/layout.h"
#include "backends/cuda/misc.h"
#include "backends/cuda/prefill.h"
#include "backends/cuda/snapshot_pool.h"
#include "core/error.h"

namespace tern::cuda {

namespace {
constexpr int kInitialCapacity = 4096;

// A number no sequence's buffers had before (CudaSequence::buffers).
uint64_t next_buffers() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}
}  // namespace

CudaSequence::~CudaSequence() {
  for (StepGraph& g : graphs) g.reset();
  for (auto* p : k) cudaFree(p);
  for (auto* p : v) cudaFree(p);
  for (auto* p : S) cudaFree(p);
  for (auto* p : conv) cudaFree(p);
  cudaFree(scalars);
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

void CudaBackend::StepIo::prepare(const GenerateHooks& hooks, int vocab, int slots) {
  const size_t words = mask_words(vocab);
  if (hooks.on_logits && logits == nullptr)
    check(cudaMallocHost(&logits, size_t(slots) * size_t(vocab) * sizeof(float)), "pinned logits");
  if (hooks.constraint && mask_host == nullptr) {
    check(cudaMallocHost(&mask_host, words * sizeof(uint32_t)), "pinned mask");
    check(cudaMalloc(&mask_dev, words * sizeof(uint32_t)), "mask");
  }
}

CudaBackend::StepIo::~StepIo() {
  cudaFreeHost(logits);
  cudaFreeHost(mask_host);
  cudaFree(mask_dev);
}

CudaBackend::Lane::~Lane() {
  step.reset();  // its buffers before the stream they were made on
  cudaFreeHost(ids);
  if (own_stream) cudaStreamDestroy(stream);
}

CudaBackend::~CudaBackend() {
  lanes_.clear();
  prefill_.reset();
  if (lanes_go_ != nullptr) cudaEventDestroy(lanes_go_);
  if (writer_stream_ != nullptr) cudaStreamDestroy(writer_stream_);
  cudaFreeHost(ids_out_);
  for (cudaEvent_t e : id_ready_) cudaEventDestroy(e);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaBackend::init() {
  check(cudaGetDevice(&device_), "cudaGetDevice");
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
  snapshots_ = std::make_shared<SnapshotPool>();
  for (int i = 0; i < kStepLanes; ++i) {
    auto lane = std::make_unique<Lane>();
    lane->stream = stream_;
    if (i > 0) {
      check(cudaStreamCreateWithFlags(&lane->stream, cudaStreamNonBlocking), "lane stream");
      lane->own_stream = true;
    }
    lane->step = std::make_unique<DecodeStep>(*w_, lane->stream);
    check(cudaMallocHost(&lane->ids, 2 * sizeof(int)), "pinned ids");
    check(cudaStreamSynchronize(lane->stream), "scratch");
    lanes_.push_back(std::move(lane));
  }
  check(cudaEventCreateWithFlags(&lanes_go_, cudaEventDisableTiming), "event");
  prefill_ = std::make_unique<Prefill>(*w_, stream_, step0().logits());
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
  check(cudaMalloc(&s->scalars, sizeof(StepScalars)), "step scalars");
  check(cudaMemsetAsync(s->scalars, 0, sizeof(StepScalars), stream_), "step scalars");
  check(cudaMalloc(&s->out, CudaSequence::kOutRing * sizeof(int)), "out");
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
  s.buffers = next_buffers();
}

void CudaBackend::set_prefill_options(const PrefillOptions& o) {
  prefill_->set_options(o);
}

const PrefillOptions& CudaBackend::prefill_options() const {
  return prefill_->options();
}

void CudaBackend::forward(Sequence& seq, std::span<const int32_t> tokens, Logits which,
                          std::vector<float>& logits) {
  auto& s = dynamic_cast<CudaSequence&>(seq);
  const ModelConfig& c = w_->cfg;
  const PrefillOptions& o = prefill_->options();
  const int64_t n = int64_t(tokens.size()), start = s.length();
  check_tokens(s, tokens);
  logits.resize(which == Logits::none ? 0 : size_t(which == Logits::all ? n : 1) * size_t(c.vocab));
  if (n < o.step_below) return forward_steps(s, tokens, which, logits);
  const int* dev_tokens = prefill_->upload(tokens);
  reserve(s, std::min<int64_t>(start + n + 1, c.max_positions));  // the call's KV cache at once
  for (int64_t done = 0; done < n;) {
    const int64_t T = std::min<int64_t>(o.chunk, n - done);
    float* dst = logits.data();
    if (which == Logits::all) dst += size_t(done) * size_t(c.vocab);
    const bool last = done + T == n;
    prefill_->chunk(s, dev_tokens + done, int(T), which == Logits::all ? Logits::all : Logits::last,
                    which == Logits::all || (last && which == Logits::last) ? dst : nullptr);
    s.length_ += T;
    done += T;
  }
  set_position(s, start + n);  // the decode step reads the position on the device; syncs
}

// The decode step graph token by token (calls of fewer than step_below tokens).
void CudaBackend::forward_steps(CudaSequence& s, std::span<const int32_t> tokens, Logits which,
                                std::vector<float>& logits) {
  const ModelConfig& c = w_->cfg;
  const int64_t T = int64_t(tokens.size());
  // The arg-max step advances the draw counter: kept aside for the completion.
  check(cudaMemcpyAsync(&s.scalars->saved_step, &s.scalars->step, sizeof(int),
                        cudaMemcpyDeviceToDevice, stream_),
        "step");
  for (int64_t t = 0; t < T; ++t) {
    check(cudaMemcpyAsync(&s.scalars->token, &tokens[size_t(t)], sizeof(int),
                          cudaMemcpyHostToDevice, stream_),
          "token");
    run_step(s, StepChoice::argmax, step0());
    if (which == Logits::all || (which == Logits::last && t == T - 1)) {
      float* dst = logits.data() + (which == Logits::all ? size_t(t) * c.vocab : 0);
      check(cudaMemcpyAsync(dst, step0().logits(), size_t(c.vocab) * sizeof(float),
                            cudaMemcpyDeviceToHost, stream_),
            "logits");
    }
  }
  check(cudaMemcpyAsync(&s.scalars->step, &s.scalars->saved_step, sizeof(int),
                        cudaMemcpyDeviceToDevice, stream_),
        "step");
  check(cudaStreamSynchronize(stream_), "forward");
}

StepGraph& CudaBackend::step_graph(CudaSequence& s, StepChoice choice, DecodeStep& step) {
  reserve(s, s.length() + 1);
  return step.graph(s, choice);
}

void CudaBackend::run_step(CudaSequence& s, StepChoice choice, DecodeStep& step) {
  check(cudaGraphLaunch(step_graph(s, choice, step).exec, step.stream()), "graph launch");
  s.length_ += 1;
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
  check(cudaMemcpyAsync(&s.scalars->step, &zero, sizeof(int), cudaMemcpyHostToDevice, stream_),
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
  TokenConstraint* con = hooks.constraint;
  io_.prepare(hooks, V, 2);
  check_ids(std::span(&first, 1));
  if (max_tokens <= 0) return;
  check(cudaMemcpyAsync(&s.scalars->token, &first, sizeof(int), cudaMemcpyHostToDevice, stream_),
        "token");
  // Step i feeds the token chosen by step i - 1 (already on the device). Its
  // forward is the whole step graph, or under a constraint the graph without
  // the choice, which then follows once the host has the mask.
  DecodeStep& step = step0();
  auto forward = [&] { run_step(s, con ? StepChoice::none : s.choice(), step); };
  // The end of step i: the raw logits into slot i % 2 (step i - 2's, which
  // the host has used); the host rewrites the mask only after the previous
  // id arrived, so after its copy. The id's ring slot is draws (the
  // completion's step count: earlier calls continue there).
  auto finish = [&](int i) {
    end_step(s, step, hooks, io_, i % 2, ids_out_ + i % 2);
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
    if (hooks.on_logits) hooks.on_logits({io_.logits + size_t(i % 2) * V, size_t(V)});
    const int32_t id = ids_out_[i % 2];
    if (con) con->accept(id);
    if (!on_token(id) || i + 1 == max_tokens) break;
    if (con) finish(i + 1);
  }
  check(cudaStreamSynchronize(stream_), "generate");
}

CudaBackend::RowsGraph::~RowsGraph() {
  if (exec != nullptr) cudaGraphExecDestroy(exec);
}

// Waves of kMaxRows rows. Each wave's rows get room for their position
// (reserve() syncs stream_) before anything of the wave is enqueued, and
// every lane is done before the wave's ids go out, so the single-sequence
// calls after find every stream idle.
void CudaBackend::step(std::span<StepRow> rows) {
  for (StepRow& r : rows) check_ids(std::span(&r.token, 1));
  for (size_t w = 0; w < rows.size(); w += kMaxRows)
    step_wave(rows.subspan(w, std::min(rows.size() - w, size_t(kMaxRows))));
}

// The rows' forward (and, unconstrained, the choice) in one graph on
// stream_, row j in lane j's scratch; then on each row's lane its end as
// generate() ends a step: the raw logits, the host's mask and the choice,
// the id. A lone row runs its own step graph, as generate() does.
void CudaBackend::step_wave(std::span<StepRow> rows) {
  const int V = w_->cfg.vocab;
  std::vector<StepRowOn> on;
  std::vector<uint64_t> key;
  for (size_t j = 0; j < rows.size(); ++j) {
    auto& s = dynamic_cast<CudaSequence&>(*rows[j].seq);
    reserve(s, s.length() + 1);
    const StepChoice choice = rows[j].hooks->constraint ? StepChoice::none : s.choice();
    const int splits = attn_splits(s.length() + 1, w_->cfg.n_kv_heads);
    on.push_back({&s, lanes_[j]->step.get(), choice, splits});
    key.insert(key.end(), {s.buffers, uint64_t(splits), uint64_t(choice)});
  }
  for (size_t j = 0; j < rows.size(); ++j) {
    Lane& lane = *lanes_[j];
    lane.io.prepare(*rows[j].hooks, V, 1);
    lane.ids[0] = rows[j].token;
    check(cudaMemcpyAsync(&on[j].seq->scalars->token, lane.ids, sizeof(int), cudaMemcpyHostToDevice,
                          stream_),
          "token");
  }
  if (rows.size() == 1) {
    run_step(*on[0].seq, on[0].choice, step0());
  } else {
    RowsGraph& g = rows_graphs_[rows.size()];
    if (g.key != key) {
      g.key.clear();  // a failed capture leaves no key that matches
      capture_graph(stream_, g.exec, [&] { DecodeStep::enqueue_rows(on, stream_); });
      g.key = key;
    }
    check(cudaGraphLaunch(g.exec, stream_), "graph launch");
    for (const StepRowOn& r : on) r.seq->length_ += 1;
  }
  check(cudaEventRecord(lanes_go_, stream_), "event");
  for (size_t j = 0; j < rows.size(); ++j) {
    Lane& lane = *lanes_[j];
    if (lane.own_stream) check(cudaStreamWaitEvent(lane.stream, lanes_go_), "wait");
    end_step(*on[j].seq, *lane.step, *rows[j].hooks, lane.io, 0, lane.ids + 1);
  }
  for (size_t j = 0; j < rows.size(); ++j) finish_row(*lanes_[j], rows[j]);
}

void CudaBackend::end_step(CudaSequence& s, DecodeStep& step, const GenerateHooks& hooks,
                           const StepIo& io, int slot, int* id) {
  const int V = w_->cfg.vocab;
  const size_t words = mask_words(V);
  cudaStream_t st = step.stream();
  if (hooks.on_logits)
    check(cudaMemcpyAsync(io.logits + size_t(slot) * V, step.logits(), size_t(V) * sizeof(float),
                          cudaMemcpyDeviceToHost, st),
          "logits");
  if (TokenConstraint* con = hooks.constraint) {
    if (!con->unconstrained()) {
      con->allowed({io.mask_host, words});
      check(cudaMemcpyAsync(io.mask_dev, io.mask_host, words * sizeof(uint32_t),
                            cudaMemcpyHostToDevice, st),
            "mask");
      check(mask_logits(step.logits(), io.mask_dev, V, st), "mask logits");
    }
    step.enqueue_choice(s, s.sampled);
  }
  const int64_t ring = s.draws++ & (CudaSequence::kOutRing - 1);
  check(cudaMemcpyAsync(id, s.out + ring, sizeof(int), cudaMemcpyDeviceToHost, st), "id");
}

void CudaBackend::finish_row(Lane& lane, StepRow& r) {
  check(cudaStreamSynchronize(lane.stream), "step");
  if (r.hooks->on_logits) r.hooks->on_logits({lane.io.logits, size_t(w_->cfg.vocab)});
  r.next = lane.ids[1];
  if (r.hooks->constraint) r.hooks->constraint->accept(r.next);
}

void CudaBackend::set_position(CudaSequence& s, int64_t length) {
  const int v = int(length);
  check(cudaMemcpyAsync(&s.scalars->pos, &v, sizeof(int), cudaMemcpyHostToDevice, stream_), "pos");
  check(cudaStreamSynchronize(stream_), "pos");  // v is on this frame
  s.length_ = length;
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

std::unique_ptr<SequenceState> CudaBackend::new_state(int64_t length) {
  const ModelConfig& c = w_->cfg;
  auto st = std::make_unique<CudaState>();
  st->set_length(length);
  st->S.assign(size_t(c.n_layers), nullptr);
  st->conv.assign(size_t(c.n_layers), nullptr);
  const size_t nS = size_t(c.lin_v_heads) * kGdnDim * kGdnDim * sizeof(float);
  const size_t nc = size_t(c.conv_kernel - 1) * c.conv_channels() * sizeof(float);
  st->bytes_ = state_bytes();
  st->pool = snapshots_;
  st->block = snapshots_->take(std::max<size_t>(st->bytes_, 1));
  auto* at = static_cast<uint8_t*>(st->block);
  for (int i = 0; i < c.n_layers; ++i) {
    if (c.layer_types[size_t(i)] != LayerType::linear_attention) continue;
    st->S[size_t(i)] = reinterpret_cast<float*>(at);
    st->conv[size_t(i)] = reinterpret_cast<float*>(at + nS);
    at += nS + nc;
  }
  return st;
}

std::unique_ptr<SequenceState> CudaBackend::save(const Sequence& seq) {
  const auto& s = dynamic_cast<const CudaSequence&>(seq);
  auto st = new_state(s.length());
  auto& cs = static_cast<CudaState&>(*st);
  copy_state(s.S, s.conv, cs.S, cs.conv);
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
  return kv + state_bytes();
}

std::string CudaBackend::numerics_id() const {
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_), "capability");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_), "capability");
  const PrefillOptions& p = prefill_options();
  return fmt::format(
      "cuda sm_{}{} sms={} chunk={} step_below={} chunked_from={} moe_bn={} dense_bn={} "
      "gemm_bm={} moe_bm={}",
      major, minor, sm_count(), p.chunk, p.step_below, p.chunked_from, p.moe_bn, p.dense_bn,
      p.gemm_bm, p.moe_bm);
}

size_t CudaBackend::memory_free() const {
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

size_t CudaBackend::kv_bytes(int64_t from, int64_t to) const {
  const ModelConfig& c = w_->cfg;
  const int64_t chunks = (to + kKvChunk - 1) / kKvChunk - from / kKvChunk;
  return size_t(c.n_full_layers()) * 2 * size_t(c.n_kv_heads) * size_t(chunks) * kKvChunk *
         kHeadDim * sizeof(uint16_t);
}

std::vector<DeviceBytes> CudaBackend::kv_stretches(const CudaSequence& s, int64_t from,
                                                   int64_t to) const {
  const size_t row = kHeadDim * sizeof(uint16_t);
  const size_t first = size_t(from / kKvChunk) * kKvChunk;
  const size_t width = (size_t(to + kKvChunk - 1) / kKvChunk * kKvChunk - first) * row;
  std::vector<DeviceBytes> out;
  for (size_t i = 0; i < s.k.size(); ++i) {
    if (s.k[i] == nullptr) continue;
    for (uint16_t* cache : {s.k[i], s.v[i]})
      for (size_t h = 0; h < size_t(w_->cfg.n_kv_heads); ++h)
        out.push_back(
            {reinterpret_cast<std::byte*>(cache) + (h * size_t(s.capacity) + first) * row, width});
  }
  return out;
}

// Whole chunks: the positions past `to` in the last one are whatever the
// cache held there (finite; the attention masks them), and the next piece
// rewrites its first chunk with the same values below its start.
void CudaBackend::export_kv(const Sequence& seq, int64_t from, int64_t to, const ByteSink& out) {
  const auto& s = dynamic_cast<const CudaSequence&>(seq);
  TERN_CHECK(0 <= from && from <= to && to <= s.length());
  staging_.download(kv_stretches(s, from, to), out, stream_);
}

void CudaBackend::import_kv(Sequence& seq, int64_t from, int64_t to, const ByteSource& in) {
  auto& s = dynamic_cast<CudaSequence&>(seq);
  TERN_CHECK(s.length() == from && from <= to);
  reserve(s, to + 1);
  staging_.upload(kv_stretches(s, from, to), in, stream_);
  set_position(s, to);
}

size_t CudaBackend::state_bytes() const {
  const ModelConfig& c = w_->cfg;
  return size_t(c.n_linear_layers()) *
         (size_t(c.lin_v_heads) * kGdnDim * kGdnDim +
          size_t(c.conv_kernel - 1) * c.conv_channels()) *
         sizeof(float);
}

// On the disk cache's writer thread (one at a time): the snapshot's one
// block, whose contents save() (or import_state()) finished writing before
// returning, through the writer's own stream and pinned buffers.
void CudaBackend::export_state(const SequenceState& st, const ByteSink& out) const {
  const auto& cs = dynamic_cast<const CudaState&>(st);
  check(cudaSetDevice(device_), "cudaSetDevice");
  if (writer_stream_ == nullptr)
    check(cudaStreamCreateWithFlags(&writer_stream_, cudaStreamNonBlocking), "writer stream");
  const DeviceBytes all{static_cast<std::byte*>(cs.block), cs.bytes_};
  writer_staging_.download(std::span(&all, 1), out, writer_stream_);
}

std::unique_ptr<SequenceState> CudaBackend::import_state(int64_t length, const ByteSource& in) {
  auto st = new_state(length);
  auto& cs = static_cast<CudaState&>(*st);
  const DeviceBytes all{static_cast<std::byte*>(cs.block), cs.bytes_};
  staging_.upload(std::span(&all, 1), in, stream_);
  return st;
}

}  // namespace tern::cuda
