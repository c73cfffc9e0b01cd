// The 4/8-bit affine row dot product shared by the GEMV-shaped kernels.
// y = sum_g s_g * (sum_{k in g} q_k x_k) + b_g * (sum_{k in g} x_k): MLX's own
// per-group arithmetic. Each lane streams 16-byte chunks of a row (32 codes at
// 4 bits, 16 at 8 bits), four chunks in flight.
//
// Version 2 (measured in docs/kernels/cuda-decode.md): the activation is staged
// in shared memory "chunk-minor" as float4s (float4 f of chunk c at f * chunks
// + c), so a warp whose lanes hold consecutive chunks reads it with conflict-free
// 16-byte loads, one per four weights; codes become floats by the exponent trick
// (0x4B0000qq is 2^23 + q) instead of the quarter-rate int-to-float convert;
// four independent accumulators break the FMA dependency chain. Version 3: codes
// reach the exponent trick by byte permutes (3.4 instead of 4 instructions per
// 4-bit weight), and each lane loads only the chunks it owns.
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/layout.h"

namespace tern::cuda {

template <int BITS>
struct Chunk {
  static constexpr int kCodes = 128 / BITS;  // codes per 16-byte chunk
  static constexpr int kVecs = kCodes / 4;   // float4s of x per chunk
};

// An activation staged by stage_x: float4 f of chunk c at x4[f * stride + c].
struct StagedX {
  const float4* x4;
  const float* xsum;  // per chunk
  int stride;         // chunks staged in all
};

// Bytes of shared memory stage_x needs for K inputs (+ 32 floats of scratch).
template <int BITS>
constexpr size_t stage_bytes(int K) {
  return sizeof(float) * (size_t(K) + size_t(K / Chunk<BITS>::kCodes) + 32) + 16;
}

// Loads x ([K]) into smem, optionally RMS-normalised and multiplied by norm[],
// with the per-chunk sums. `sm` is the dynamic shared memory (16-byte aligned).
template <int BITS>
__device__ StagedX stage_x(const float* x, int K, const float* norm, float eps, float* sm) {
  using C = Chunk<BITS>;
  const int NC = K / C::kCodes;
  float4* x4 = reinterpret_cast<float4*>(sm);
  float* xsum = sm + K;
  float* red = xsum + NC;
  float inv = 1.0f;
  if (norm != nullptr) {
    float ss = 0.0f;
    for (int v = threadIdx.x; v < K / 4; v += blockDim.x) {
      const float4 q = reinterpret_cast<const float4*>(x)[v];
      ss += (q.x * q.x + q.y * q.y) + (q.z * q.z + q.w * q.w);
    }
    ss = block_sum(ss, red);
    inv = 1.0f / sqrtf(ss / float(K) + eps);
  }
  // Thread t stages float4 number t of x (elements 4t..4t+3).
  for (int v = threadIdx.x; v < K / 4; v += blockDim.x) {
    float4 q = reinterpret_cast<const float4*>(x)[v];
    if (norm != nullptr) {
      const float4 w = reinterpret_cast<const float4*>(norm)[v];
      q = make_float4(q.x * inv * w.x, q.y * inv * w.y, q.z * inv * w.z, q.w * inv * w.w);
    }
    const int c = v / C::kVecs, f = v % C::kVecs;
    x4[f * NC + c] = q;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < NC; c += blockDim.x) {
    float s = 0.0f;
#pragma unroll
    for (int f = 0; f < C::kVecs; ++f) {
      const float4 q = x4[f * NC + c];
      s += (q.x + q.y) + (q.z + q.w);
    }
    xsum[c] = s;
  }
  __syncthreads();
  return {x4, xsum, NC};
}

// x[i] of a staged activation (for writing it back out).
template <int BITS>
__device__ __forceinline__ float staged_value(const StagedX& s, int i) {
  using C = Chunk<BITS>;
  const int c = i / C::kCodes, e = i % C::kCodes;
  return reinterpret_cast<const float*>(s.x4 + (e / 4) * s.stride + c)[e % 4];
}

// Byte k of `bytes` as the float 2^23 + byte (one byte permute: the byte
// under the exponent bits 0x4B), minus 2^23: the code exactly.
__device__ __forceinline__ float byte_to_float(uint32_t bytes, int k) {
  return __uint_as_float(__byte_perm(bytes, 0x4B000000u, 0x7540u + k)) - 8388608.0f;
}

template <int BITS>
__device__ __forceinline__ float chunk_dot(const uint4 q, const float4* x4, int stride) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
  float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (BITS == 4) {
      // Even codes in the low nibbles, odd codes in the high ones: a byte each.
      const uint32_t lo = w[k] & 0x0F0F0F0Fu, hi = (w[k] >> 4) & 0x0F0F0F0Fu;
      const float4 x0 = x4[(2 * k) * stride], x1 = x4[(2 * k + 1) * stride];
      a0 = fmaf(byte_to_float(lo, 0), x0.x, a0);
      a1 = fmaf(byte_to_float(hi, 0), x0.y, a1);
      a2 = fmaf(byte_to_float(lo, 1), x0.z, a2);
      a3 = fmaf(byte_to_float(hi, 1), x0.w, a3);
      a0 = fmaf(byte_to_float(lo, 2), x1.x, a0);
      a1 = fmaf(byte_to_float(hi, 2), x1.y, a1);
      a2 = fmaf(byte_to_float(lo, 3), x1.z, a2);
      a3 = fmaf(byte_to_float(hi, 3), x1.w, a3);
    } else {
      const float4 x0 = x4[k * stride];
      a0 = fmaf(byte_to_float(w[k], 0), x0.x, a0);
      a1 = fmaf(byte_to_float(w[k], 1), x0.y, a1);
      a2 = fmaf(byte_to_float(w[k], 2), x0.z, a2);
      a3 = fmaf(byte_to_float(w[k], 3), x0.w, a3);
    }
  }
  return (a0 + a1) + (a2 + a3);
}

// Lanes that cooperate on one row: a power of two, at most 32, at most the chunks.
__device__ __forceinline__ int lanes_per_row(int chunks) {
  int l = 1;
  while (l < 32 && 2 * l <= chunks) l *= 2;
  return l;
}

// One 16-byte chunk of a row with its group's scale and bias, loaded ahead of use.
struct ChunkLoad {
  uint4 q = make_uint4(0, 0, 0, 0);
  float s = 0.0f, b = 0.0f;
};

template <int BITS>
__device__ __forceinline__ ChunkLoad load_chunk(const DMat& W, size_t row, int c) {
  const int K = W.cols, G = K / kGroup, g = c * Chunk<BITS>::kCodes / kGroup;
  ChunkLoad l;
  l.q = __ldcs(reinterpret_cast<const uint4*>(W.w + row * size_t(K * BITS / 32)) + c);
  const uint32_t sb = W.sb[row * G + g];
  l.s = sb_scale(sb), l.b = sb_bias(sb);
  return l;
}

// This lane's share (lane sl of lpr lanes) of the dot products of `n` rows of W
// (n <= N) with the staged activation: row r's chunk c meets staged chunk
// xoff[r] + c. Reduce across the lpr lanes afterwards. All N rows' U chunks are
// loaded before any is used, so their memory latencies overlap.
template <int BITS, int N, int U>
__device__ __forceinline__ void rows_dot(const DMat& W, const size_t (&rows)[N],
                                         const int (&xoff)[N], int n, const StagedX& x, int sl,
                                         int lpr, float (&acc)[N]) {
  const int NC = W.cols / Chunk<BITS>::kCodes;
  for (int c0 = sl; c0 < NC; c0 += U * lpr) {
    ChunkLoad l[N][U];
#pragma unroll
    for (int r = 0; r < N; ++r)
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (r < n && c0 + u * lpr < NC) l[r][u] = load_chunk<BITS>(W, rows[r], c0 + u * lpr);
#pragma unroll
    for (int r = 0; r < N; ++r)
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * lpr;
        if (r < n && c < NC)
          acc[r] += l[r][u].s * chunk_dot<BITS>(l[r][u].q, x.x4 + xoff[r] + c, x.stride) +
                    l[r][u].b * x.xsum[xoff[r] + c];
      }
  }
}

// One row, U chunks of it in flight per lane. U should be the chunks each lane
// owns (chunks / lpr) up to 4: a larger U issues loads and math for chunks
// past the row's end, which cost issue slots even when predicated off.
template <int BITS, int U = 4>
__device__ __forceinline__ float row_dot(const DMat& W, size_t row, const StagedX& x, int sl,
                                         int lpr) {
  const size_t rows[1] = {row};
  const int xoff[1] = {0};
  float acc[1] = {0.0f};
  rows_dot<BITS, 1, U>(W, rows, xoff, 1, x, sl, lpr, acc);
  return acc[0];
}

// Asks L2 for this lane's chunks of row `row` (no registers held).
template <int BITS>
__device__ __forceinline__ void prefetch_row(const DMat& W, size_t row, int sl, int lpr) {
  const int K = W.cols, NC = K / Chunk<BITS>::kCodes;
  const uint4* p = reinterpret_cast<const uint4*>(W.w + row * size_t(K * BITS / 32));
  for (int c = sl; c < NC; c += lpr) prefetch_l2(p + c);
}

__device__ __forceinline__ float group_sum(float v, int lpr) {
  for (int o = lpr / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

}  // namespace tern::cuda
