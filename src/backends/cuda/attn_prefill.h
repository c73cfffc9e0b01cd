// Launchers of the gated attention prefill (attn_prefill.cu): the prep and
// causal GQA flash attention over the KV cache (layout.h's chunked layout).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tern::cuda {

// The prep of T tokens at positions pos0..: q RMSNorm + partial RoPE into q16
// (bf16 [H][T][256], times log2(e) / 16), k RMSNorm + RoPE and v into the KV
// caches (layout.h's chunked layout, bf16).
struct AttnPrepArgs {
  const float* qkv = nullptr;  // [T][H 512 | KV 256 | KV 256]
  int T = 0, pos0 = 0;
  const float *q_norm = nullptr, *k_norm = nullptr;
  float eps = 1e-6f;
  int heads = 0, kv_heads = 0, rotary = 0, capacity = 0;
  const float* inv_freq = nullptr;
  uint16_t* q16 = nullptr;
  uint16_t *k_cache = nullptr, *v_cache = nullptr;
};
cudaError_t attn_prep(const AttnPrepArgs& a, cudaStream_t st);
// Causal GQA flash attention of the T tokens over the cache's keys 0 ..
// pos0 + t: out fp32 [T][H][256] (before the output gate).
struct FlashArgs {
  const uint16_t* q16 = nullptr;
  const uint16_t *k_cache = nullptr, *v_cache = nullptr;
  int T = 0, pos0 = 0, heads = 0, kv_heads = 0, capacity = 0;
  float* out = nullptr;
  // Scratch for splitting the keys of a short chunk over a long cache (null:
  // never split): S ranges take S T heads (256 + 2) floats.
  float* work = nullptr;
  size_t work_floats = 0;
};
cudaError_t attn_flash(const FlashArgs& a, cudaStream_t st);
// The work area under which attn_flash splits as far as it would at any T.
size_t flash_work_floats(int heads, int kv_heads);

}  // namespace tern::cuda
