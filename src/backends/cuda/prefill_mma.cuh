// Device helpers of the prefill kernels: the fp16 tensor-core mma (m16n8k16,
// fp32 sums) and the 4-bit dequantisation into fp16 pairs.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/common.cuh"

namespace tern::cuda::pf {

__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t h2u(__half2 h) {
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ __half2 u2h(uint32_t u) {
  return *reinterpret_cast<const __half2*>(&u);
}
// Two floats as fp16 (round to nearest), lo in the low half.
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  return h2u(__floats2half2_rn(lo, hi));
}

// The 8 codes of a word (code j at bits 4j) as the fp16 weights s q + b
// (q exact, one rounding in the fma), in pairs (q0, q4), (q1, q5), (q2, q6),
// (q3, q7). The magic number 0x6400 (1024) with the code in the low mantissa
// bits gives 1024 + q (or 1024 + 16 q for the odd codes) without a conversion;
// subtracting 1024 (or scaling by 1/16 and subtracting 64) is exact.
// (w & mask) | magic in one LOP3: written as C++, ptxas kept the AND and the
// OR apart (both operands immediates), 64 extra instructions in a GEMM round
// of ~476 (SASS of the 256 x 16 MoE tile before and after:
// bench/results/sass-gemm-256x16-9d4ce41-103194f.txt.gz).
template <uint32_t kMask>
__device__ __forceinline__ uint32_t and_or(uint32_t w, uint32_t magic) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "n"(kMask), "r"(magic));
  return r;
}

__device__ __forceinline__ void dequant8(uint32_t w, __half2 s, __half2 b, uint32_t (&o)[4]) {
  constexpr uint32_t kLo = 0x000F000Fu, kHi = 0x00F000F0u, kMagic = 0x64006400u;
  const __half2 k1024 = u2h(0x64006400u), k16th = u2h(0x2C002C00u), k64 = u2h(0x54005400u);
  const uint32_t w8 = w >> 8;
  const __half2 q0 = __hsub2(u2h(and_or<kLo>(w, kMagic)), k1024);
  const __half2 q1 = __hfma2(u2h(and_or<kHi>(w, kMagic)), k16th, __hneg2(k64));
  const __half2 q2 = __hsub2(u2h(and_or<kLo>(w8, kMagic)), k1024);
  const __half2 q3 = __hfma2(u2h(and_or<kHi>(w8, kMagic)), k16th, __hneg2(k64));
  o[0] = h2u(__hfma2(q0, s, b));
  o[1] = h2u(__hfma2(q1, s, b));
  o[2] = h2u(__hfma2(q2, s, b));
  o[3] = h2u(__hfma2(q3, s, b));
}

// A DMat::sb word as fp16 pairs (s, s) and (b, b).
__device__ __forceinline__ void scale_bias_h2(uint32_t sb, __half2& s, __half2& b) {
  s = __float2half2_rn(sb_scale(sb));
  b = __float2half2_rn(sb_bias(sb));
}

__device__ __forceinline__ uint4 lds128(const void* p) {
  return *reinterpret_cast<const uint4*>(p);
}

__device__ __forceinline__ uint32_t word(const uint4& u, int i) {
  return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}

}  // namespace tern::cuda::pf
