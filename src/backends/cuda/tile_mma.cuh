// 4-bit GEMV on tensor cores (KERNELS.md §3, recommended mapping 4): a warp
// computes 16 rows at a time with mma.sync m16n8k16, the weights as the A
// operand and the activation as B, straight from the MLX row layout.
//
// Lane l (g = l/4, t = l%4) loads 16 bytes (32 codes) of rows g and g+8 at
// chunk 4r + t of round r (a round is 128 columns). A nibble pair (j, j+4) of a
// word masked and OR-ed with 0x4300 becomes two bf16 "128 + q", exact; the
// contraction is order-free, so the activation is staged in the matching
// order instead of moving weights. Only 4 of B's 8 columns would be needed:
// column t carries the bf16 high part of x for chunk slot t and column t+4 its
// low part (x - bf16(x)), so the products keep ~16 bits of x (fp32-grade
// results from bf16 tensor cores, at no extra instruction). The accumulator
// lane l holds columns 2t, 2t+1 of rows g and g+8: one quantisation group
// (2r + t%2) of either part, which it scales in fp32:
//   y += s * C + (b - 128 s) * X_group   (X only once: in the high-part lanes).
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace tern::cuda::tile {

constexpr int kRound = 128;  // columns per round
constexpr int kWarps = 16;   // warps per block, splitting K
constexpr int kThreads = kWarps * 32;

// One lane's share of one round of a 16-row tile.
struct Load {
  uint4 q0, q1;       // 32 codes of rows g and g+8
  uint32_t sb0, sb1;  // scale|bias of the group this lane's accumulator holds
};

// `r0`, `r8`: rows g and g+8 (clamped to the matrix by the caller); `round`
// counts 128-column steps along the row. 32-bit offsets: a matrix holds < 2^32
// 16-byte chunks.
__device__ __forceinline__ Load load(const DMat& W, uint32_t r0, uint32_t r8, int round) {
  const uint32_t t = threadIdx.x & 3, K = uint32_t(W.cols), G = K / kGroup;
  const uint32_t chunk = round * 4 + t, grp = round * 2 + (t & 1);
  const uint4* w = reinterpret_cast<const uint4*>(W.w);
  Load l;
  l.q0 = __ldcs(w + (r0 * (K / 32) + chunk));
  l.q1 = __ldcs(w + (r8 * (K / 32) + chunk));
  l.sb0 = __ldcs(W.sb + (r0 * G + grp));
  l.sb1 = __ldcs(W.sb + (r8 * G + grp));
  return l;
}

// The activation staged for the B operand: per 32-column chunk, 64 bytes of
// bf16 high parts and 64 of low parts in fragment order, and per group the sum
// of the staged values.
struct Staged {
  const uint4* hi;
  const uint4* lo;
  const float* xsum;  // [K / 64]
  float scale;        // multiplies the finished dot products (the RMSNorm factor)
};

// Shared memory stage() needs for K columns, plus `red` floats of reduction space.
constexpr size_t stage_bytes(int K, int red) {
  return size_t(K) * 4 + sizeof(float) * (size_t(K / 4) + size_t(K / 64) + 32 + red);
}

__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Stages x ([K], a multiple of 64), optionally multiplied by norm[]; `weight`
// (when given) multiplies column k by weight[k / per_weight]. RMSNorm is a
// scalar per token, so it is not applied here: its factor, from the sum of
// squares gathered in the same pass, comes back as Staged::scale for the
// finished dot products, which saves a pass over x and two barriers. Each
// thread takes whole words (8 columns), which land as one 16-byte store of
// high parts and one of low parts. Returns the staged view and the `red`
// floats after it. Ends with a block barrier.
__device__ inline Staged stage(const float* x, int K, const float* norm, float eps,
                               const float* weight, int per_weight, float* sm, float** red) {
  uint4* hi = reinterpret_cast<uint4*>(sm);
  uint4* lo = hi + K / 8;
  float* wsum = sm + K;       // per word: sum of the staged values
  float* wsq = wsum + K / 8;  // per word: sum of squares of x
  float* xsum = wsq + K / 8;
  float* inv = xsum + K / 64;
  *red = inv + 32;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const float4* n4 = reinterpret_cast<const float4*>(norm);
  for (int v = threadIdx.x; v < K / 8; v += blockDim.x) {
    float4 p = x4[2 * v], q = x4[2 * v + 1];
    if (norm != nullptr) {
      wsq[v] = (p.x * p.x + p.y * p.y) + (p.z * p.z + p.w * p.w) + (q.x * q.x + q.y * q.y) +
               (q.z * q.z + q.w * q.w);
      const float4 np = n4[2 * v], nq = n4[2 * v + 1];
      p = make_float4(p.x * np.x, p.y * np.y, p.z * np.z, p.w * np.w);
      q = make_float4(q.x * nq.x, q.y * nq.y, q.z * nq.z, q.w * nq.w);
    }
    if (weight != nullptr) {
      const float m = weight[8 * v / per_weight];
      p = make_float4(p.x * m, p.y * m, p.z * m, p.w * m);
      q = make_float4(q.x * m, q.y * m, q.z * m, q.w * m);
    }
    // Fragment order of a word's columns 0..7: 0 4 1 5 2 6 3 7.
    const float e[8] = {p.x, q.x, p.y, q.y, p.z, q.z, p.w, q.w};
    float h[8], l[8], s = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      h[i] = __bfloat162float(__float2bfloat16_rn(e[i]));
      l[i] = __bfloat162float(__float2bfloat16_rn(e[i] - h[i]));
      s += h[i] + l[i];
    }
    hi[v] =
        make_uint4(bf16x2(h[0], h[1]), bf16x2(h[2], h[3]), bf16x2(h[4], h[5]), bf16x2(h[6], h[7]));
    lo[v] =
        make_uint4(bf16x2(l[0], l[1]), bf16x2(l[2], l[3]), bf16x2(l[4], l[5]), bf16x2(l[6], l[7]));
    wsum[v] = s;
  }
  __syncthreads();
  for (int gi = threadIdx.x; gi < K / 64; gi += blockDim.x) {
    float s = 0.0f;
    for (int w = 0; w < 8; ++w) s += wsum[8 * gi + w];
    xsum[gi] = s;
  }
  if (norm != nullptr && threadIdx.x < 32) {
    float ss = 0.0f;
    for (int v = threadIdx.x; v < K / 8; v += 32) ss += wsq[v];
    ss = warp_sum(ss);
    if (threadIdx.x == 0) *inv = 1.0f / sqrtf(ss / float(K) + eps);
  }
  __syncthreads();
  return {hi, lo, xsum, norm != nullptr ? *inv : 1.0f};
}

// Codes j and j+4 of a word as bf16 128 + q: one LOP3 ((w & mask) | magic,
// the magic in a register so both constants fit) after the shift.
__device__ __forceinline__ uint32_t pair(uint32_t w, int j, uint32_t magic) {
  uint32_t d;
  asm("lop3.b32 %0, %1, 0x000F000F, %2, 0xEA;" : "=r"(d) : "r"(w >> (4 * j)), "r"(magic));
  return d;
}

__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// A lane's B fragments of one round (the same for every tile of the round)
// and the sum of the staged values of its accumulator's group.
struct Fragment {
  uint4 xv[4];
  float X;
};

// `xchunk`: the staged chunk index of the round's slot 0.
__device__ __forceinline__ Fragment fragment(const Staged& x, int xchunk) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  Fragment f{};
  const uint4* src = g == t ? x.hi : g == t + 4 ? x.lo : nullptr;
  if (src != nullptr)
#pragma unroll
    for (int i = 0; i < 4; ++i) f.xv[i] = src[(xchunk + t) * 4 + i];
  f.X = t < 2 ? x.xsum[xchunk / 2 + (t & 1)] : 0.0f;
  return f;
}

// Adds one round's contribution to this lane's partial sums of rows g and g+8.
__device__ __forceinline__ void round_dot(const Load& l, const Fragment& f, float& acc0,
                                          float& acc8) {
  const uint32_t w0[4] = {l.q0.x, l.q0.y, l.q0.z, l.q0.w}, w8[4] = {l.q1.x, l.q1.y, l.q1.z, l.q1.w};
  const uint32_t m = 0x43004300u;
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    mma(d, pair(w0[i], 0, m), pair(w8[i], 0, m), pair(w0[i], 1, m), pair(w8[i], 1, m), f.xv[i].x,
        f.xv[i].y);
    mma(d, pair(w0[i], 2, m), pair(w8[i], 2, m), pair(w0[i], 3, m), pair(w8[i], 3, m), f.xv[i].z,
        f.xv[i].w);
  }
  const float s0 = sb_scale(l.sb0), b0 = sb_bias(l.sb0);
  const float s1 = sb_scale(l.sb1), b1 = sb_bias(l.sb1);
  acc0 += s0 * (d[0] + d[1]) + (b0 - 128.0f * s0) * f.X;
  acc8 += s1 * (d[2] + d[3]) + (b1 - 128.0f * s1) * f.X;
}

// Sums a lane's partials over the 4 lanes of its quad (lane t = 0 gets them).
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(kFull, v, 1);
  return v + __shfl_xor_sync(kFull, v, 2);
}

}  // namespace tern::cuda::tile
