// Launchers of the prefill's MoE routing and combine (moe_prefill.cu); the
// experts' grouped GEMMs between them are prefill_gemm.h's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/layout.h"
#include "backends/cuda/prefill_gemm.h"

namespace tern::cuda {

// Router logits of T rows: logits[t][r] = a32[t] . W[r] (8-bit MLX layout,
// near-fp32 tensor-core sums, moe_prefill.cu), r < W.rows (the experts, then the shared expert's
// gate), in `parts` partial sums over K ranges: logits[p][t][r], summed in
// order by route_tokens (RouteArgs::parts).
cudaError_t router_logits(const DMat& W, const float* a32, int T, int parts, float* logits,
                          cudaStream_t st);
// The parts for T tokens: more than one only for short chunks (their blocks
// would leave SMs idle), and then parts T <= kRouterPartTokens.
constexpr int kRouterPartTokens = 2048, kRouterMaxParts = 8;
int router_parts(int T, int rows, int K);
// Floats router_logits writes for chunks of up to T tokens.
inline size_t router_logit_floats(int T, int rows) {
  return size_t(rows) * size_t(T > kRouterPartTokens ? T : kRouterPartTokens);
}

// The routing of T tokens from their router logits ([T][E + 1]): top_k experts
// (ties to the lower id), weights renormalised over them, sigmoid of the
// shared gate; then the rows of each expert gathered in expert order (the
// shared expert E takes every token, last): A = T (top_k + 1) slots.
struct RouteArgs {
  const float* logits = nullptr;  // [parts][T][E + 1]
  int T = 0, E = 0, top_k = 0, parts = 1;
  int* counts = nullptr;      // [E + 1] scratch, zero before the first call (left zero)
  int* offsets = nullptr;     // [E + 2] scratch: each group's first slot, then A
  int* cursor = nullptr;      // [E + 1] scratch
  int* ids = nullptr;         // [T][top_k] scratch: the chosen experts
  float* wts = nullptr;       // [T][top_k + 1] scratch: their weights, the shared gate last
  int* slot_row = nullptr;    // [A]: the token of each slot
  float* slot_w = nullptr;    // [A]: its routing weight (shared: sigmoid of the gate)
  int* token_slot = nullptr;  // [T][top_k + 1]: each token's slots, in choice order, shared last
  GemmTile* map = nullptr;    // [max_tiles(bn)] N-tiles of the grouped GEMMs
  int* map_count = nullptr;
  int bn = 128;
};
// Tiles a map of T tokens may need at `bn` rows a tile.
int route_max_tiles(int T, int E, int top_k, int bn);
cudaError_t route_tokens(const RouteArgs& a, cudaStream_t st);

// h[t][d] += sum over the token's slots (choice order, shared last) of y16[slot][d]
// (fp16; D a multiple of 8).
cudaError_t moe_combine(const uint16_t* y16, const int* token_slot, int T, int slots, int D,
                        float* h, cudaStream_t st);

}  // namespace tern::cuda
