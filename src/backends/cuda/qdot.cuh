// The 4/8-bit affine row dot product shared by the GEMV-shaped kernels.
// y = sum_g s_g * (sum_{k in g} q_k x_k) + b_g * (sum_{k in g} x_k): MLX's own
// per-group arithmetic. Each lane streams 16-byte chunks of a row (32 codes at
// 4 bits, 16 at 8 bits), four chunks in flight; the activation sits in shared
// memory padded by one float per chunk so that the lanes of a warp, each on
// its own chunk, hit distinct banks.
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace tern::cuda {

template <int BITS>
struct Chunk {
  static constexpr int kCodes = 128 / BITS;   // codes per 16-byte chunk
  static constexpr int kStride = kCodes + 1;  // padded smem stride
};

// Bytes of shared memory stage_x needs for K inputs (+ 32 floats of scratch).
template <int BITS>
constexpr size_t stage_bytes(int K) {
  return sizeof(float) * (size_t(K / Chunk<BITS>::kCodes) * (Chunk<BITS>::kStride + 1) + 32);
}

// Loads x ([K]) into smem, optionally RMS-normalised and multiplied by norm[],
// and the per-chunk sums. Returns the pointer past the staged data.
template <int BITS>
__device__ void stage_x(const float* x, int K, const float* norm, float eps, float* xs, float* xsum,
                        float* red) {
  using C = Chunk<BITS>;
  float inv = 1.0f;
  if (norm != nullptr) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < K; i += blockDim.x) ss += x[i] * x[i];
    ss = block_sum(ss, red);
    inv = 1.0f / sqrtf(ss / float(K) + eps);
  }
  for (int i = threadIdx.x; i < K; i += blockDim.x) {
    float v = x[i];
    if (norm != nullptr) v = v * inv * norm[i];
    xs[(i / C::kCodes) * C::kStride + i % C::kCodes] = v;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < K / C::kCodes; c += blockDim.x) {
    float s = 0.0f;
    for (int j = 0; j < C::kCodes; ++j) s += xs[c * C::kStride + j];
    xsum[c] = s;
  }
  __syncthreads();
}

template <int BITS>
__device__ __forceinline__ float chunk_dot(const uint4 q, const float* x) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
  constexpr int per = 32 / BITS;
  constexpr uint32_t mask = (1u << BITS) - 1;
  float d = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int j = 0; j < per; ++j) d = fmaf(float((w[k] >> (BITS * j)) & mask), x[k * per + j], d);
  return d;
}

// Lanes that cooperate on one row: a power of two, at most 32, at most the chunks.
__device__ __forceinline__ int lanes_per_row(int chunks) {
  int l = 1;
  while (l < 32 && 2 * l <= chunks) l *= 2;
  return l;
}

// This lane's share of row `row` of W (lane sl of lpr lanes); reduce afterwards.
template <int BITS>
__device__ __forceinline__ float row_dot(const DMat& W, size_t row, const float* xs,
                                         const float* xsum, int sl, int lpr) {
  using C = Chunk<BITS>;
  const int K = W.cols, NC = K / C::kCodes, G = K / kGroup;
  const uint4* p = reinterpret_cast<const uint4*>(W.w + row * size_t(K * BITS / 32));
  const __nv_bfloat16* sc = reinterpret_cast<const __nv_bfloat16*>(W.s) + row * G;
  const __nv_bfloat16* bi = reinterpret_cast<const __nv_bfloat16*>(W.b) + row * G;
  float acc = 0.0f;
  for (int c0 = sl; c0 < NC; c0 += 4 * lpr) {
    uint4 q[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int c = c0 + u * lpr;
      q[u] = c < NC ? __ldcs(p + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int c = c0 + u * lpr;
      if (c < NC) {
        const int g = c * C::kCodes / kGroup;
        acc += bf(sc[g]) * chunk_dot<BITS>(q[u], xs + c * C::kStride) + bf(bi[g]) * xsum[c];
      }
    }
  }
  return acc;
}

__device__ __forceinline__ float group_sum(float v, int lpr) {
  for (int o = lpr / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

}  // namespace tern::cuda
