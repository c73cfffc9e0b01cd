// The chunked (WY) delta rule's shared parts (docs/model.md §DeltaNet
// chunked): the scratch that chunk_prep (gdn_chunk_prep.cu) writes and
// chunk_state (gdn_chunk_state.cu) reads, and the tf32 tensor-core helpers
// both use. 64 tokens a chunk.
//
// The scratch, per (chunk, value head) a record of kVRec bytes:
//   W  fp16 [64][128]  the WY factor T diag(beta Gamma) K, T = (I + A)^-1
//   M  fp16 [64][64]   (q_r . k_s) e^(gam_r - gam_s) for s <= r, else 0
//   U  fp32 4 x [64][32]  T diag(beta) V in the four 32-column tiles of the state
//   F  fp32 [132]      e^gam_r (64), e^(gam_C - gam_r) (64), e^gam_C, zeros
// then per (chunk, key head) a record of kKRec bytes: Q, K fp16 [64][128].
// Rows past a partial chunk's end are zeros. The fp16 rows are swizzled (the
// 16-byte piece p of row r stored at p ^ (r % 8)) so that ldmatrix's eight
// rows of a piece fall in distinct banks once a bulk copy has brought a tile
// into shared memory as it is; U's float pairs likewise (pair s of row r at
// s ^ 4 (r % 4): an accumulator's row pairs in distinct banks).
#pragma once

#include <cuda_fp16.h>

#include "backends/cuda/common.cuh"
#include "backends/cuda/layout.h"

namespace tern::cuda::chunked {

constexpr int kD = kGdnDim, kC = 64, kCols = 32;  // kCols: a chunk_state block's state columns
constexpr int kRowH = kD * 2;                     // bytes of an fp16 row of 128
constexpr int kF = 132;                           // F's floats (16-byte multiple)
constexpr int kW = 0, kM = kW + kC * kRowH, kU = kM + kC * kC * 2, kFo = kU + kC * kD * 4,
              kVRec = kFo + 1024;
constexpr int kQ = 0, kK = kC * kRowH, kKRec = 2 * kC * kRowH;
constexpr int kUTile = kC * kCols * 4;  // bytes of one U tile
static_assert(kVRec % 1024 == 0 && kF * 4 <= 1024 && kF % 4 == 0, "16-byte pieces");

// Byte offset of element (r, c) of a swizzled fp16 tile with rows of row_bytes.
__device__ __forceinline__ int swz(int r, int c, int row_bytes) {
  return r * row_bytes + ((((c >> 3) ^ (r & 7))) << 4) + 2 * (c & 7);
}
// Float offset of element (r, c) (c even: the pair c, c + 1) of a swizzled U tile.
__device__ __forceinline__ int u_at(int r, int c) {
  return r * kCols + 2 * ((c >> 1) ^ (4 * (r & 3))) + (c & 1);
}

__device__ __forceinline__ float tf32(float x) {
  uint32_t u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
  return __uint_as_float(u);
}

// d += a b, mma m16n8k8 tf32 with fp32 sums: lane (g, t) gives a = A[g][t],
// A[g + 8][t], A[g][t + 4], A[g + 8][t + 4] and b = B[t][g], B[t + 4][g].
// Not volatile: the compiler may interleave independent chains.
__device__ __forceinline__ void mma_tf32(float (&d)[4], float a0, float a1, float a2, float a3,
                                         float b0, float b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(__float_as_uint(a0)), "r"(__float_as_uint(a1)), "r"(__float_as_uint(a2)),
        "r"(__float_as_uint(a3)), "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}

}  // namespace tern::cuda::chunked
