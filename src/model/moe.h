// The mixture-of-experts block on the CPU (docs/model.md §MoE): softmax router,
// top-k, renormalised weights, routed SwiGLU experts (tokens grouped by
// expert), and the shared expert with its sigmoid gate.
#pragma once

#include <cstdint>
#include <vector>

#include "checkpoint/weights.h"

namespace tern::model {

struct Route {
  std::vector<int> experts;    // top-k expert ids, best first
  std::vector<float> weights;  // their routing weights
};

// Routing of one token from its router logits.
Route route_token(const float* logits, int n_experts, int top_k, bool renormalise);

// x: [T][hidden] (already normed) -> out: [T][hidden].
void moe_forward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t T, float* out);

}  // namespace tern::model
