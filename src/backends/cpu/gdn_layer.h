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
  // x: T normed rows (quantised), the runs of `seqs` -> out: [T][hidden].
  void forward(Context& ctx, const ModelConfig& c, const GdnWeights& w,
               const std::vector<float>& conv_t, const Activations& x, int64_t T,
               std::span<const SeqRows> seqs, float* out);

 private:
  // The causal conv + SiLU of one sequence's rows (mixed: its first row).
  static void conv(const Context& ctx, const std::vector<float>& conv_t, int64_t C, int64_t K,
                   int64_t c0, int64_t n, float* mixed, int64_t T, model::GdnState& st);

  std::vector<float> mixed_, z_, b_, a_, y_;
  PerThread scratch_;
  Activations ya_;
};

}  // namespace tern::cpu
