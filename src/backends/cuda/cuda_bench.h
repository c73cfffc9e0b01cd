// What tern bench and the GPU tests reach in the CUDA backend beyond the
// Backend interface: synthetic contexts and lengths set without a prefill,
// kernels left out of the step, timed and traced steps, the prefill's phase
// profile; and what they measure of the device itself (copy bandwidth,
// launch overhead, bf16 matrix rate, memory in use).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/trace.h"

namespace tern::cuda {

struct PrefillProfile;  // prefill.h

class CudaBench {
 public:
  explicit CudaBench(CudaBackend& be) : be_(be) {}

  const DeviceWeights& weights() const { return *be_.w_; }
  // The stream every call of the backend orders its work on.
  cudaStream_t stream() const { return be_.stream_; }
  // Makes room for n positions in seq's KV cache.
  void reserve(Sequence& seq, int64_t n);
  // Fills the KV cache and the GDN state with random values and sets the
  // length (no real prefill).
  void fill_synthetic(Sequence& seq, int64_t length, uint64_t seed);
  void set_length(Sequence& seq, int64_t length);
  // Leaves the named kernels (leave_out.h) out of the step graphs captured
  // afterwards, which then time the rest (the tokens are no longer the
  // model's). Throws on an unknown name.
  void leave_out(const std::set<std::string>& names);
  // Kernels in seq's step (captured on demand).
  int step_kernels(Sequence& seq);
  // Seconds for n steps (graph replays), timed with CUDA events.
  double time_steps(Sequence& seq, int n);
  // The per-block records of n steps (trace.cuh), after a warm-up step; a
  // TERN_TRACE build (throws otherwise).
  std::vector<TraceRecord> trace_steps(Sequence& seq, int n);
  // Times the phases of the prefills that follow into *p (nullptr: off).
  void set_prefill_profile(PrefillProfile* p);

 private:
  // One step, to capture its graph and warm up, then back to the length.
  void warm_up(CudaSequence& s);
  CudaBackend& be_;
};

// Device-to-device copy bandwidth (read + write counted), bytes/s.
double copy_bandwidth();
// The bf16 matrix rate (an 8192^3 cuBLAS GEMM, cuBLAS loaded at run time),
// FLOP/s; 0 without cuBLAS (matrix_rate.cpp).
double bf16_matrix_rate();
// Device memory in use (bytes), all processes.
size_t device_memory_used();
// Seconds per replay of a graph of n empty kernels chained as the step's are.
double launch_overhead(int n);

}  // namespace tern::cuda
