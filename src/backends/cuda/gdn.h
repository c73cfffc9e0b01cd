// Launcher of the Gated DeltaNet decode step (gdn.cu).
#pragma once

#include "backends/cuda/layout.h"

namespace tern::cuda {

// One Gated DeltaNet decode step after the conv: q/k L2 norms, gates, the delta
// rule on S ([v_heads][k][v] fp32). conv: [2*Hk*128 + Hv*128] post-conv q|k|v;
// b/a follow the in-projection layout. The gated RMSNorm of the output is the
// out_proj GEMV's (GemvArgs::gate).
struct GdnStepArgs {
  const float* conv = nullptr;
  const float* beta_in = nullptr;  // [Hv] pre-sigmoid
  const float* a_in = nullptr;     // [Hv]
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  float* S = nullptr;
  float* y = nullptr;  // [Hv*128], before the gated RMSNorm (the out_proj GEMV applies it)
  int k_heads = 0, v_heads = 0;
};
cudaError_t gdn_step(const GdnStepArgs& a, cudaStream_t st);
// The step for each row (rows.h; the same heads in every row).
cudaError_t gdn_step_rows(const GdnStepArgs* rows, int n, cudaStream_t st);

}  // namespace tern::cuda
