// The mixture-of-experts block on the fast path (docs/model.md §MoE), one pass
// over the routed rows: the router (and shared-expert gate), every token's
// top-k, the tokens grouped by expert; then one pool run over (expert, row
// block) items for gate, up and SwiGLU of every routed expert and the shared
// one; then one over blocks of output rows, each adding every expert's down
// projection times its routing weight (ascending expert id, then the shared
// expert times its sigmoid gate, as the reference sums them).
#pragma once

#include "backends/cpu/context.h"

namespace tern::cpu {

// Top-k of one token's router logits: softmax, the k most probable (ties to
// the lower id), weights renormalised when `renormalise`. No allocation.
void route(const float* logits, int n_experts, int top_k, bool renormalise, int32_t* experts,
           float* weights);

class MoeLayer {
 public:
  // x: T normed rows (quantised) -> out: [T][hidden].
  void forward(Context& ctx, const ModelConfig& c, const MoeWeights& w, const Activations& x,
               int64_t T, float* out);

 private:
  std::vector<float> logits_, gate_, wt_, h_, u_, hs_, us_;
  std::vector<int32_t> picked_, count_, offset_, tok_, iota_;
  Activations ha_, hsa_;
  struct Item {
    int expert;  // n_experts: the shared expert
    int64_t r0, r1;
  };
  std::vector<Item> items_;
};

}  // namespace tern::cpu
