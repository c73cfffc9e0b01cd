// Prompt processing on the GPU: a chunk of T tokens through the model layer
// by layer on the prefill kernels (prefill_act.h, prefill_gemm.h,
// moe_prefill.h, gdn_prefill.h, attn_prefill.h), every weight read once a
// chunk, on tensor cores, with no host synchronisation inside the chunk: the
// routing's sizes stay on the device (the grouped GEMMs launch the upper bound
// of tiles). The KV cache and the recurrent and conv state carry over chunks
// and calls exactly as the decode step leaves them. CudaBackend::forward cuts
// a call into chunks. docs/kernels/cuda-prefill.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "backend/backend.h"
#include "backends/cuda/cuda_sequence.h"
#include "backends/cuda/device_weights.h"
#include "backends/cuda/prefill_tiles.h"

namespace tern::cuda {

// Seconds per prefill phase (tern bench --prefill's split), accumulated while
// set: CUDA events between the phases' launches.
enum class PrefillPhase { moe_gemm, dense_gemm, gdn, attention, other, count };
inline const char* const kPrefillPhaseNames[] = {"moe_gemm", "dense_gemm", "gdn", "attention",
                                                 "other"};
struct PrefillProfile {
  double seconds[int(PrefillPhase::count)] = {};
  std::map<std::string, double> kernels;  // the same time by launch (in_proj, delta, ...)
};

class Prefill {
 public:
  // `logits`: [vocab] on the device, where the last row's logits land (the
  // decode step's, DecodeStep::logits).
  Prefill(const DeviceWeights& w, cudaStream_t st, float* logits);
  ~Prefill();
  Prefill(const Prefill&) = delete;
  Prefill& operator=(const Prefill&) = delete;

  // Checks o (check_prefill_options) and runs the chunks that follow by it.
  void set_options(const PrefillOptions& o);
  const PrefillOptions& options() const { return opt_; }
  // Times the phases of the chunks that follow into *p (nullptr: off).
  void set_profile(PrefillProfile* p) { profile_ = p; }
  // Temporaries for a call's chunks and the call's tokens on the device,
  // which chunk() reads.
  const int* upload(std::span<const int32_t> tokens);
  // Tokens [0, T) of `tokens` (on the device) through the model after s's
  // length() tokens (the caller then advances s by T); the logits `which`
  // asks for into host memory `logits` (the last row's, or all T), none when
  // it is null.
  void chunk(CudaSequence& s, const int* tokens, int T, Logits which, float* logits);

 private:
  struct Buffers;  // prefill_buffers.h
  class Pass;      // prefill.cpp
  // The temporaries for chunks of up to T tokens (grown, never shrunk).
  Buffers& buffers(int T);

  const DeviceWeights& w_;
  cudaStream_t st_;
  float* logits_;
  PrefillOptions opt_;
  PrefillProfile* profile_ = nullptr;
  std::unique_ptr<Buffers> b_;
};

}  // namespace tern::cuda
