// Gated full attention on the CPU (docs/model.md §Attention): q/gate split per head,
// q/k RMSNorm, partial rotate-half RoPE, KV cache, causal GQA softmax attention,
// sigmoid output gate, output projection. fp32 throughout.
#pragma once

#include <cstdint>
#include <vector>

#include "checkpoint/weights.h"

namespace tern::model {

struct KvCache {
  std::vector<float> k, v;  // [positions][kv_heads * head_dim], post-norm post-RoPE keys
};

// Rotates the first `rot` dims of one head (pairs i, i + rot/2) for position pos.
void apply_rope(float* x, int rot, float theta, int64_t pos);

// x: [T][hidden] (already normed) at positions pos0.. -> out: [T][hidden].
void attention_forward(const ModelConfig& c, const AttnWeights& w, const float* x, int64_t T,
                       int64_t pos0, KvCache& kv, float* out);

}  // namespace tern::model
