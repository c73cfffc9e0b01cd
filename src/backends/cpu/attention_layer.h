// Gated full attention on the fast path (docs/model.md §Attention): q/k/v in one pool
// run, q/k norms and RoPE (angles once per position), the KV cache appended in
// the reference's layout, blocked causal GQA attention over (KV head, query
// block, key range) items with an online softmax, the ranges of one query
// merged, the sigmoid gate, the output projection.
#pragma once

#include "backends/cpu/context.h"
#include "model/attention.h"

namespace tern::cpu {

class AttentionLayer {
 public:
  // x: T normed rows (quantised) at positions pos0.. -> out: [T][hidden].
  void forward(Context& ctx, const ModelConfig& c, const AttnWeights& w, const Activations& x,
               int64_t T, int64_t pos0, model::KvCache& kv, float* out);

 private:
  std::vector<float> qg_, k_, v_, attn_, cos_, sin_, part_;
  PerThread scratch_;
  Activations aa_;
  struct Item {
    int g;
    int64_t i0, i1;  // queries
    int64_t k0, k1;  // keys
  };
  std::vector<Item> items_;
};

}  // namespace tern::cpu
