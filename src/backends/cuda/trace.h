// Per-block timestamps of the decode kernels, the host's side (a TERN_TRACE
// build; the device's side is trace.cuh): the records tern bench --trace
// writes, and the binding of every traced translation unit to a buffer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tern::cuda {

// The kinds of the traced kernels, as TraceRecord::kind.
enum class TraceKind : uint32_t {
  gemv_early = 1,  // dense GEMVs (weights loaded before the PDL wait)
  gemv_routed,     // route_up
  gemv_late,       // rows known after the wait: experts down
  gdn_step,
  attn_split,
  attn_combine,
};
// A block's phases, in ns since its start (0: the kernel has no such mark;
// `landed`: the tile GEMVs' first batch's last tile in, as warp 0 saw it).
enum class TraceMark : uint32_t {
  waited,
  issued,
  staged,
  landed,
  dotted,
  synced,
  first,
  fetched,
  picked,
  count
};
// The marks' names, in TraceMark's order (the columns of `tern bench --trace`).
constexpr const char* kTraceMarkNames[] = {"waited", "issued", "staged",  "landed", "dotted",
                                           "synced", "first",  "fetched", "picked"};
static_assert(sizeof(kTraceMarkNames) / sizeof(kTraceMarkNames[0]) == size_t(TraceMark::count));
struct TraceRecord {
  uint64_t start_ns;  // globaltimer
  uint32_t kind, block, sm, ended;
  uint32_t mark[uint32_t(TraceMark::count)];
};
struct TraceSink {
  TraceRecord* rec = nullptr;
  unsigned* count = nullptr;
  unsigned capacity = 0;
};
#ifdef TERN_TRACE
// Binds every traced translation unit to s (rec nullptr: off).
cudaError_t trace_bind(const TraceSink& s);
cudaError_t trace_bind_gemv(const TraceSink& s);
cudaError_t trace_bind_moe(const TraceSink& s);
cudaError_t trace_bind_gdn(const TraceSink& s);
cudaError_t trace_bind_attention(const TraceSink& s);
#endif

}  // namespace tern::cuda
