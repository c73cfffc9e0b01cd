// Launchers of sample.cu: the sampler's token choice on the device, and the
// empty kernels tern bench times a graph of.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "backend/sampling_rules.h"

namespace tern::cuda {

// The sampler's token choice (twin: sample_token in backend/sampler.h), a few
// launches that replace argmax_advance in the captured step: penalties from
// counts[] (the chosen token's count is incremented), temperature, top-k and
// top-p thresholds by radix select on the keys of z, min-p, and the seeded
// draw for step *step; then the same hand-off as argmax_advance. `rules` and
// `counts` live on the device, so a captured graph serves any parameters.
struct SampleArgs {
  const float* logits = nullptr;
  int n = 0;
  const SampleRules* rules = nullptr;
  int* counts = nullptr;    // [n]
  void* scratch = nullptr;  // sample_scratch_bytes(n), zero before the first call
  int* token = nullptr;
  int* out = nullptr;
  int out_mask = 0;
  int* step = nullptr;
  int* pos = nullptr;
};
size_t sample_scratch_bytes(int n);
cudaError_t sample_advance(const SampleArgs& a, cudaStream_t st);
// The same for each row (rows.h), each with its own rules, counts and scratch.
cudaError_t sample_advance_rows(const SampleArgs* rows, int n, cudaStream_t st);

// n empty kernels chained with programmatic dependent launch, as the decode
// step chains its kernels: tern bench times a graph of them (launch overhead).
cudaError_t empty_kernels(int n, cudaStream_t st);

}  // namespace tern::cuda
