// Launchers of the Gated DeltaNet prefill: the prep, the conv state and the
// scan (gdn_prefill.cu), and the chunked (WY) form of the delta rule
// (gdn_chunk_prep.cu, gdn_chunk_state.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace tern::cuda {

// The token-parallel part after the in-projection: the causal conv over the
// qkv channels with the carried state (not updated here), SiLU, q and k L2
// norms (q also / sqrt(128)), beta = sigmoid(b) and the log-decay g =
// -exp(A_log) softplus(a + dt_bias).
struct GdnPrepArgs {
  const float* proj = nullptr;  // [T][ld]: qkv (C) | z (Hv 128) | b (Hv) | a (Hv)
  int T = 0, ld = 0;
  const float* conv_w = nullptr;      // [C][kernel]
  const float* conv_state = nullptr;  // [kernel - 1][C], oldest first
  int kernel = 0;
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  int k_heads = 0, v_heads = 0;
  float* q = nullptr;     // [T][Hk][128]
  float* k = nullptr;     // [T][Hk][128]
  float* v = nullptr;     // [T][Hv][128]
  float* beta = nullptr;  // [T][Hv]
  float* g = nullptr;     // [T][Hv]
};
cudaError_t gdn_prep(const GdnPrepArgs& a, cudaStream_t st);
// The conv state after the T rows: the last kernel - 1 pre-conv rows of
// [state; proj rows].
cudaError_t gdn_conv_state(const float* proj, int T, int ld, int channels, int kernel,
                           float* conv_state, cudaStream_t st);
// The delta rule over T tokens per value head on S ([Hv][128][128] fp32,
// updated): o [T][Hv][128]. `scan`: token by token, each block keeping a
// slice of the state in registers; else the chunked (WY) form on tensor cores
// (tf32 mma), 64 tokens a chunk, in two launches: gdn_chunk_prep makes every
// chunk's factors at once into the scratch, then gdn_chunk_state passes over
// the chunks in order.
struct DeltaArgs {
  const float *q = nullptr, *k = nullptr, *v = nullptr, *beta = nullptr, *g = nullptr;
  int T = 0, k_heads = 0, v_heads = 0;
  float* S = nullptr;
  float* o = nullptr;
  float* scratch = nullptr;  // chunked: delta_scratch_floats(T, k_heads, v_heads)
};
cudaError_t gdn_delta_scan(const DeltaArgs& a, cudaStream_t st);
cudaError_t gdn_chunk_prep(const DeltaArgs& a, cudaStream_t st);
cudaError_t gdn_chunk_state(const DeltaArgs& a, cudaStream_t st);
size_t delta_scratch_floats(int T, int k_heads, int v_heads);

}  // namespace tern::cuda
