#include "backends/cuda/cuda_bench.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/check.h"
#include "backends/cuda/decode_step.h"
#include "backends/cuda/leave_out.h"
#include "backends/cuda/misc.h"
#include "backends/cuda/prefill.h"
#include "backends/cuda/sample.h"
#include "core/error.h"

namespace tern::cuda {

namespace {

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

void CudaBench::reserve(Sequence& seq, int64_t n) {
  be_.reserve(dynamic_cast<CudaSequence&>(seq), n);
}

void CudaBench::set_length(Sequence& seq, int64_t length) {
  auto& s = dynamic_cast<CudaSequence&>(seq);
  be_.reserve(s, length + 1);
  be_.set_position(s, length);
}

void CudaBench::fill_synthetic(Sequence& seq, int64_t length, uint64_t seed) {
  auto& s = dynamic_cast<CudaSequence&>(seq);
  const ModelConfig& c = be_.config();
  cudaStream_t st = be_.stream_;
  be_.reserve(s, length + 1);
  for (int i = 0; i < c.n_layers; ++i) {
    if (s.k[size_t(i)] != nullptr) {
      const size_t n = size_t(c.n_kv_heads) * s.capacity * kHeadDim;
      check(fill_bf16(s.k[size_t(i)], n, -1.0f, 1.0f, seed + 2 * size_t(i), st), "fill");
      check(fill_bf16(s.v[size_t(i)], n, -1.0f, 1.0f, seed + 2 * size_t(i) + 1, st), "fill");
    } else {
      const size_t nS = size_t(c.lin_v_heads) * kGdnDim * kGdnDim;
      check(fill_f32(s.S[size_t(i)], nS, -0.01f, 0.01f, seed + 1000 + size_t(i), st), "fill");
    }
  }
  check(cudaStreamSynchronize(st), "fill");
  set_length(s, length);
}

void CudaBench::leave_out(const std::set<std::string>& names) {
  check_step_kernel_names(names);
  for (auto& lane : be_.lanes_) lane->step->left_out = names;
  for (auto& g : be_.rows_graphs_) g.key.clear();  // the rows' graphs are captured again
}

int CudaBench::step_kernels(Sequence& seq) {
  auto& s = dynamic_cast<CudaSequence&>(seq);
  return be_.step_graph(s, s.choice(), be_.step0()).kernels;
}

void CudaBench::warm_up(CudaSequence& s) {
  be_.run_step(s, s.choice(), be_.step0());
  set_length(s, s.length() - 1);
}

double CudaBench::time_steps(Sequence& seq, int n) {
  auto& s = dynamic_cast<CudaSequence&>(seq);
  be_.reserve(s, s.length() + n + 1);
  warm_up(s);  // capture outside the timed region
  return event_seconds(be_.stream_, [&] {
    for (int i = 0; i < n; ++i) be_.run_step(s, s.choice(), be_.step0());
  });
}

std::vector<TraceRecord> CudaBench::trace_steps(Sequence& seq, int n) {
#ifndef TERN_TRACE
  (void)seq, (void)n;
  fail("tern bench --trace needs a tern built with -DTERN_TRACE=ON");
#else
  auto& s = dynamic_cast<CudaSequence&>(seq);
  cudaStream_t st = be_.stream_;
  be_.reserve(s, s.length() + n + 1);
  warm_up(s);  // capture and warm up untraced
  constexpr unsigned kCapacity = 1u << 18;
  TraceRecord* rec = nullptr;
  unsigned* count = nullptr;
  check(cudaMalloc(&rec, kCapacity * sizeof(TraceRecord)), "trace buffer");
  check(cudaMalloc(&count, sizeof(unsigned)), "trace buffer");
  check(cudaMemsetAsync(count, 0, sizeof(unsigned), st), "trace buffer");
  check(cudaStreamSynchronize(st), "trace buffer");
  check(trace_bind({rec, count, kCapacity}), "trace bind");
  for (int i = 0; i < n; ++i) be_.run_step(s, s.choice(), be_.step0());
  check(cudaStreamSynchronize(st), "trace sync");
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

void CudaBench::set_prefill_profile(PrefillProfile* p) {
  be_.prefill_->set_profile(p);
}

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
