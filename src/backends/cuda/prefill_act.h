// Launcher of the prefill's staging (prefill_act.cu): a chunk of T tokens
// through one layer at a time, every weight read once per chunk (the prefill
// kernels: prefill_act.h, prefill_gemm.h, moe_prefill.h, gdn_prefill.h,
// attn_prefill.h).
//
// Activations between the kernels: the residual stream h is fp32 [T][D]; the
// input of every 4-bit GEMM is "staged": fp16 [rows][K] with the columns of
// each 128 in the k order of the GEMM's wgmma steps (staged_col), each row
// multiplied by a power of two that puts its largest |value| in [2^14, 2^15)
// (fp16 keeps 11 significant bits over the row's whole range; the GEMM's
// epilogue multiplies the row's sums back by `xscale`).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tern::cuda {

// Where column c of a staged row of K columns is stored. Lane quad t of the
// GEMM's warps holds the weights of columns 32 t + 8 i + j of a round of 128
// (word i, code j) and dequantises them in pairs (j, j + 4) into A fragments:
// k step 2 i + h takes codes 2 h (k 2 t, 2 t + 1: codes j, j + 4) and 2 h + 1
// (k 2 t + 8, 2 t + 9). A round is stored in that k order, so that wgmma reads
// B as a plain K-major matrix; a last round of 64 columns (t < 2) is stored
// packed, half of each 16-byte chunk, and the GEMM fills the other half with 0.
__host__ __device__ constexpr int staged_col(int c, int K) {
  const int r = c / 128, t = c % 128 / 32, i = c % 32 / 8, j = c % 8;
  const int n = 128 * (r + 1) <= K ? 4 : 2;  // lane quads the round has
  const int h = (j >> 1) & 1, b = j & 1, e = j >> 2;
  return 128 * r + 8 * n * i + 4 * n * h + 2 * n * b + 2 * t + e;
}

// What stage_rows does to row t of x ([T][K] fp32, K a multiple of 64 and at
// most 4096) before staging it:
//   norm:  RMSNorm over the row, times norm[k];
//   gated: RMSNorm over each 128 columns (a GDN value head), times norm[k %
//          128] and silu(gate[t * gate_ld + k]) (the GDN gated norm);
//   gate:  times sigmoid(gate[t * gate_ld + (k / hd) * 2 hd + hd + k % hd])
//          (the attention output gate, hd = 256, q|gate interleaved by head);
//   plain: as it is.
enum class StageMode { plain, norm, gated, gate };
struct StageArgs {
  const float* x = nullptr;
  int T = 0, K = 0;
  StageMode mode = StageMode::plain;
  const float* norm = nullptr;
  float eps = 1e-6f;
  const float* gate = nullptr;
  int gate_ld = 0;
  uint16_t* out = nullptr;  // [T][K] staged fp16
  float* xscale = nullptr;  // [T]: the factor the GEMM multiplies each row's sums by
  float* out32 = nullptr;   // optional [T][K]: the prepared row in fp32 (the router's input)
};
cudaError_t stage_rows(const StageArgs& a, cudaStream_t st);

}  // namespace tern::cuda
