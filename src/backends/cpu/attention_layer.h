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
  // x: T normed rows (quantised), the runs of `seqs` -> out: [T][hidden].
  void forward(Context& ctx, const ModelConfig& c, const AttnWeights& w, const Activations& x,
               int64_t T, std::span<const SeqRows> seqs, float* out);

 private:
  std::vector<float> qg_, k_, v_, attn_, cos_, sin_, part_;
  PerThread scratch_;
  Activations aa_;
  struct Item {
    int seq, g;
    int64_t i0, i1;  // queries, of the sequence's rows
    int64_t k0, k1;  // keys
  };
  std::vector<Item> items_;
  // Per sequence: its first item, query block and key ranges a query.
  struct Split {
    size_t item0;
    int64_t qb, n_qb, splits;
  };
  std::vector<Split> splits_;
  std::vector<int32_t> seq_of_;  // each row's sequence
};

}  // namespace tern::cpu
