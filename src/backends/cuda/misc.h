// Launchers of misc.cu: the tile layout's writer, the embedding lookups,
// the arg-max choice with its hand-off into the next step, the constrained
// decoding mask, and the random fills behind --dummy weights and synthetic
// contexts.
#pragma once

#include <cstdint>

#include "backends/cuda/layout.h"

namespace tern::cuda {

// Writes the tile layout of m (MLX layout, tileable) to out. pair > 0 orders
// the rows of gate/up stacks ([expert][gate rows; up rows], pair rows each):
// tile p of an expert holds gate rows 8p..8p+7 and up rows 8p..8p+7, so a
// tile finishes SwiGLU on its own.
cudaError_t to_tiles(const DMat& m, uint8_t* out, int pair, cudaStream_t st);

// h = embedding row of *token (4-bit affine, dequantised exactly as the CPU).
cudaError_t embed(const DMat& E, const int* token, float* h, cudaStream_t st);
// The same for each row of a step (rows.h).
struct EmbedArgs {
  DMat E;
  const int* token = nullptr;
  float* h = nullptr;
};
cudaError_t embed_each(const EmbedArgs* rows, int n, cudaStream_t st);
// h[t] = embedding row of tokens[t] (dequantised exactly as the CPU), t < T.
cudaError_t embed_rows(const DMat& E, const int* tokens, int T, float* h, cudaStream_t st);

// Arg-max of logits (lower index wins ties): *token = best, out[*step] = best,
// ++*step, ++*pos. counter/scratch as for the router.
struct ArgmaxArgs {
  const float* logits = nullptr;
  int n = 0;
  float* scratch = nullptr;  // [2 * blocks]
  unsigned* counter = nullptr;
  int* token = nullptr;
  int* out = nullptr;  // ring of out_mask + 1 ids
  int out_mask = 0;
  int* step = nullptr;
  int* pos = nullptr;
};
cudaError_t argmax_advance(const ArgmaxArgs& a, cudaStream_t st);
// The same for each row (rows.h), each with its own scratch and counter.
cudaError_t argmax_advance_rows(const ArgmaxArgs* rows, int n, cudaStream_t st);

// logits[i] = -inf where bit i of words is clear (twin: tern::apply_mask).
cudaError_t mask_logits(float* logits, const uint32_t* words, int n, cudaStream_t st);

// Random fills for --dummy weights and synthetic contexts (hash of seed and index).
cudaError_t fill_u32(uint32_t* p, size_t n, uint64_t seed, cudaStream_t st);
// bf16 values lo + (hi-lo)*u.
cudaError_t fill_bf16(uint16_t* p, size_t n, float lo, float hi, uint64_t seed, cudaStream_t st);
// n scale|bias words: scales uniform in [s_lo, s_hi), biases in [b_lo, b_hi).
cudaError_t fill_scale_bias(uint32_t* p, size_t n, float s_lo, float s_hi, float b_lo, float b_hi,
                            uint64_t seed, cudaStream_t st);
cudaError_t fill_f32(float* p, size_t n, float lo, float hi, uint64_t seed, cudaStream_t st);

}  // namespace tern::cuda
