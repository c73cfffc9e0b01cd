// Per-block timestamps of the decode step's main kernels, for a TERN_TRACE
// build (`tern bench --trace`): thread 0 of every traced block records when it
// started (globaltimer) and the ns from there to its phases (TraceMark) and
// to its end. Without TERN_TRACE the marks compile to nothing.
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/trace.h"

namespace tern::cuda {

#ifdef TERN_TRACE
namespace {
// One copy per translation unit (no device linking): each .cu that traces
// binds its own with TERN_TRACE_BINDER.
__device__ TraceSink g_trace;
}  // namespace

struct BlockTrace {
  uint64_t start;
  uint32_t kind;
  uint32_t mark[uint32_t(TraceMark::count)] = {};
};

__device__ __forceinline__ BlockTrace trace_begin(uint32_t kind) {
  return {global_ns(), kind};
}

__device__ __forceinline__ void trace_mark(BlockTrace& b, TraceMark m) {
  b.mark[uint32_t(m)] = uint32_t(global_ns() - b.start);
}

__device__ __forceinline__ void trace_end(const BlockTrace& b) {
  if (threadIdx.x != 0 || g_trace.rec == nullptr) return;
  const uint32_t ended = uint32_t(global_ns() - b.start);
  const unsigned i = atomicAdd(g_trace.count, 1u);
  if (i >= g_trace.capacity) return;
  unsigned sm;
  asm("mov.u32 %0, %%smid;" : "=r"(sm));
  TraceRecord& r = g_trace.rec[i];
  r = {b.start, b.kind, blockIdx.x, sm, ended};
  for (uint32_t k = 0; k < uint32_t(TraceMark::count); ++k) r.mark[k] = b.mark[k];
}

#define TERN_TRACE_BEGIN(kind) BlockTrace tern_trace_ = trace_begin(uint32_t(kind))
#define TERN_TRACE_MARK(m) trace_mark(tern_trace_, TraceMark::m)
#define TERN_TRACE_END() trace_end(tern_trace_)
#define TERN_TRACE_BINDER(name)                       \
  cudaError_t trace_bind_##name(const TraceSink& s) { \
    return cudaMemcpyToSymbol(g_trace, &s, sizeof s); \
  }
#else
#define TERN_TRACE_BEGIN(kind)
#define TERN_TRACE_MARK(m)
#define TERN_TRACE_END()
#define TERN_TRACE_BINDER(name)
#endif

}  // namespace tern::cuda
