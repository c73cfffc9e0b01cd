// Per-block timestamps of the decode step's main kernels, for a TERN_TRACE
// build (`tern bench --trace`): thread 0 of every traced block records when it
// started and ended (globaltimer, ns) and the SM cycles from its start to its
// PDL wait's return, to its staged input and to its end. Without TERN_TRACE
// the marks compile to nothing.
#pragma once

#include "backends/cuda/kernels.h"

namespace tern::cuda {

#ifdef TERN_TRACE
namespace {
// One copy per translation unit (no device linking): each .cu that traces
// binds its own with TERN_TRACE_BINDER.
__device__ TraceSink g_trace;
}  // namespace

struct BlockTrace {
  uint64_t start_ns;
  long long start;
  uint32_t kind, waited = 0, staged = 0;
};

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ BlockTrace trace_begin(uint32_t kind) {
  return {global_ns(), clock64(), kind};
}

__device__ __forceinline__ uint32_t trace_since(const BlockTrace& b) {
  return uint32_t(clock64() - b.start);
}

__device__ __forceinline__ void trace_end(const BlockTrace& b) {
  if (threadIdx.x != 0 || g_trace.rec == nullptr) return;
  const uint32_t ended = trace_since(b);
  const unsigned i = atomicAdd(g_trace.count, 1u);
  if (i >= g_trace.capacity) return;
  unsigned sm;
  asm("mov.u32 %0, %%smid;" : "=r"(sm));
  g_trace.rec[i] = {b.start_ns, global_ns(), b.kind, blockIdx.x, sm, b.waited, b.staged, ended};
}

#define TERN_TRACE_BEGIN(kind) BlockTrace tern_trace_ = trace_begin(uint32_t(kind))
#define TERN_TRACE_WAITED() (tern_trace_.waited = trace_since(tern_trace_))
#define TERN_TRACE_STAGED() (tern_trace_.staged = trace_since(tern_trace_))
#define TERN_TRACE_END() trace_end(tern_trace_)
#define TERN_TRACE_BINDER(name)                       \
  cudaError_t trace_bind_##name(const TraceSink& s) { \
    return cudaMemcpyToSymbol(g_trace, &s, sizeof s); \
  }
#else
#define TERN_TRACE_BEGIN(kind)
#define TERN_TRACE_WAITED()
#define TERN_TRACE_STAGED()
#define TERN_TRACE_END()
#define TERN_TRACE_BINDER(name)
#endif

}  // namespace tern::cuda
