// Launchers of the gated attention decode kernels (attention.cu): the prep,
// split-K GQA attention over the KV cache (layout.h's chunked layout) and the
// combine.
#pragma once

#include <cstdint>

#include "backends/cuda/layout.h"

namespace tern::cuda {

// Decode attention of one token at position *pos: the prep (q and k RMSNorm,
// partial rotate-half RoPE, k and v appended to the caches), split-K GQA
// attention over keys [0, *pos] and the combine, which also applies
// sigmoid(gate): out [H][256].
struct AttnDecodeArgs {
  const float* qkv = nullptr;  // [H * (q 256 | gate 256) | KV*256 k | KV*256 v]
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float eps = 1e-6f;
  uint16_t* k_cache = nullptr;
  uint16_t* v_cache = nullptr;
  const int* pos = nullptr;
  float* part = nullptr;  // [H][splits][256 + 2]
  float* out = nullptr;
  int heads = 0, kv_heads = 0, rotary = 0, capacity = 0, splits = 1;
  const float* inv_freq = nullptr;  // [rotary / 2], model/rope.h's table
};
cudaError_t attn_decode(const AttnDecodeArgs& a, cudaStream_t st);
// The attention of each row (rows.h), each with its own cache, position and splits.
cudaError_t attn_decode_rows(const AttnDecodeArgs* rows, int n, cudaStream_t st);
// The rotation's cos and sin at position pos (what attn_decode's prep uses),
// for its test: cs, sn [rotary / 2].
cudaError_t rotation_table(const float* inv_freq, int rotary, int pos, float* cs, float* sn,
                           cudaStream_t st);
constexpr int kMaxAttnSplits = 128;
// Splits used for a context of n keys (fixed per captured graph tier).
int attn_splits(int64_t n, int kv_heads);

}  // namespace tern::cuda
