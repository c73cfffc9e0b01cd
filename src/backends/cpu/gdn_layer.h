// The Gated DeltaNet block on the fast path (docs/model.md §DeltaNet): the four
// in-projections in one pool run, the causal conv, per value head the norms,
// gates and delta rule (recurrent for few tokens, chunked for many), the
// gated RMSNorm, and the out-projection. State as the reference keeps it.
#pragma once

#include "backends/cpu/context.h"
#include "model/gdn.h"

namespace tern::cpu {

// The conv weights transposed to [kernel][channels] (vectorises over channels).
std::vector<float> transpose_conv(const ModelConfig& c, const GdnWeights& w);

class GdnLayer {
 public:
  // x: T normed rows (quantised) -> out: [T][hidden].
  void forward(Context& ctx, const ModelConfig& c, const GdnWeights& w,
               const std::vector<float>& conv_t, const Activations& x, int64_t T,
               model::GdnState& st, float* out);

 private:
  std::vector<float> mixed_, z_, b_, a_, y_;
  PerThread scratch_;
  Activations ya_;
};

}  // namespace tern::cpu
