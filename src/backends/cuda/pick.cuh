// The MoE's expert choice in one warp: the top-k of E <= 32 N expert logits,
// ties to the lower index as on the CPU (model::route_token).
#pragma once

#include "backends/cuda/common.cuh"

namespace tern::cuda {

struct Choice {
  int id;
  float logit;
};

// The lane's keys of experts lane + 32 i: sign-flipped bits, which order like
// the floats and are never 0, which marks the entries already chosen (and
// those past E); -0 is taken as +0, which it equals (a tie, as on the CPU).
template <int N>
__device__ __forceinline__ void expert_keys(const float* l, int E, unsigned (&key)[N]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int e = lane + 32 * i;
    unsigned u = e < E ? __float_as_uint(l[e]) : 0u;
    u = u == 0x80000000u ? 0u : u;
    key[i] = e >= E ? 0u : (u & 0x80000000u) ? ~u : u | 0x80000000u;
  }
}

// Lane t < top_k gets the t-th expert and its logit. Each lane keeps keys that
// order like the floats of its N entries (experts lane + 32 i) in registers;
// each round is a local maximum and two warp reductions (redux.sync). A max
// tree in place of the local chain of compare-selects was slower (1878 cycles
// a pick of 8 of 256 against 1371: bench/probes/pick_bench.cu). The order is the
// same for any positive scale of the logits, so the experts can be picked
// before the RMSNorm factor is known.
template <int N>
__device__ Choice pick_experts(const float* l, int E, int top_k) {
  const int lane = threadIdx.x & 31;
  unsigned key[N];
  expert_keys(l, E, key);
  Choice c{0, 0.0f};
  for (int t = 0; t < top_k; ++t) {
    unsigned best = 0, bi = ~0u;
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (key[i] > best) best = key[i], bi = unsigned(lane + 32 * i);
    const unsigned top = __reduce_max_sync(kFull, best);
    const unsigned id = __reduce_min_sync(kFull, best == top ? bi : ~0u);
    if (lane == t) c.id = int(id), c.logit = l[id];
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (unsigned(lane + 32 * i) == id) key[i] = 0u;
  }
  return c;
}

}  // namespace tern::cuda
