// Gated attention prefill: the token-parallel prep and causal GQA flash
// attention for head dim 256 over the KV cache (layout.h's chunked layout).
//
// attn_prep: a block a token, a warp a head, 8 dims a lane: q and k RMSNorm
// and the partial rotate-half RoPE with decode's arithmetic and table (the
// host's inverse frequencies, sincosf of the fp32 angle), q as bf16 [H][T][256]
// scaled by log2(e) / 16 (scores in log2 units), k and v appended to the
// caches in bf16.
//
// attn_flash: a block takes 128 rows = 128 / G tokens x the G query heads of
// one KV head (GQA packing: every K/V tile is loaded once for the group), two
// warpgroups of 64 rows; tiles of 64 keys, keys 0 .. pos0 + t for token t, on
// Hopper's wgmma (bf16 in, fp32 sums): S = Q K^T with Q and K from shared
// memory, O += P V with P from the S accumulators in registers and V read
// MN-major. The cache holds each 16 positions' pieces in the decode lanes'
// order, so a tile is gathered by cp.async straight into the 128-byte-swizzled
// layout wgmma reads (no conversion pass: q and the probabilities are bf16 like
// the cache); tile j + 1 lands in the other stage while tile j is computed.
// The online softmax runs in fp32 with exp2.
//
// Split keys: a short chunk over a long cache has few blocks (two per 16
// tokens), each walking every cached key, so most SMs idle (a 25-token turn
// over 24K cached tokens: 8 blocks). The keys are then cut into S ranges of
// whole tiles (blockIdx.z), each block writes its unnormalised sums with their
// max and normaliser, and a combine kernel merges the ranges per (token, head).
#include <algorithm>

#include "backends/cuda/attn_prefill.h"
#include "backends/cuda/common.cuh"
#include "backends/cuda/host_state.h"
#include "backends/cuda/layout.h"
#include "backends/cuda/wgmma.cuh"

namespace tern::cuda {

namespace {

constexpr int kD = kHeadDim;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&b);
}

__global__ void __launch_bounds__(256) prep_kernel(AttnPrepArgs a) {
  __shared__ float cs[kD / 2], sn[kD / 2];
  const int t = int(blockIdx.x), lane = int(threadIdx.x) & 31, pos = a.pos0 + t;
  const int half = a.rotary / 2;
  if (int(threadIdx.x) < half)
    sincosf(float(pos) * a.inv_freq[threadIdx.x], &sn[threadIdx.x], &cs[threadIdx.x]);
  __syncthreads();
  const int H = a.heads, KV = a.kv_heads;
  const float* row = a.qkv + size_t(t) * (2 * H + 2 * KV) * kD;
  // Warp `head`: 0..H-1 queries, then KV keys, then KV values.
  for (int head = int(threadIdx.x) >> 5; head < H + 2 * KV; head += int(blockDim.x) >> 5) {
    const bool is_q = head < H, is_v = head >= H + KV;
    const float* src =
        is_q ? row + size_t(head) * 2 * kD : row + size_t(H) * 2 * kD + size_t(head - H) * kD;
    const int d0 = 8 * lane;
    float x[8], xp[8] = {};
    const float4* s4 = reinterpret_cast<const float4*>(src + d0);
    x[0] = s4[0].x, x[1] = s4[0].y, x[2] = s4[0].z, x[3] = s4[0].w;
    x[4] = s4[1].x, x[5] = s4[1].y, x[6] = s4[1].z, x[7] = s4[1].w;
    if (!is_v) {
      float ss = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) ss += x[i] * x[i];
      const float f = rsqrtf(warp_sum(ss) * (1.0f / float(kD)) + a.eps);
      const float* w = is_q ? a.q_norm : a.k_norm;
      const int pair = d0 < a.rotary ? (d0 < half ? d0 + half : d0 - half) : -1;
      if (pair >= 0) {
        const float4* p4 = reinterpret_cast<const float4*>(src + pair);
        xp[0] = p4[0].x, xp[1] = p4[0].y, xp[2] = p4[0].z, xp[3] = p4[0].w;
        xp[4] = p4[1].x, xp[5] = p4[1].y, xp[6] = p4[1].z, xp[7] = p4[1].w;
      }
      const float sign = d0 < half ? -1.0f : 1.0f;
      const int freq = pair >= 0 ? min(d0, pair) : 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float v = x[i] * f * w[d0 + i];
        x[i] = pair < 0 ? v : v * cs[freq + i] + xp[i] * f * w[pair + i] * (sign * sn[freq + i]);
      }
    }
    if (is_q) {
      constexpr float qs = kLog2e / 16.0f;  // log2(e) / sqrt(256)
      uint4 v;
      v.x = pack_bf16(x[0] * qs, x[1] * qs), v.y = pack_bf16(x[2] * qs, x[3] * qs);
      v.z = pack_bf16(x[4] * qs, x[5] * qs), v.w = pack_bf16(x[6] * qs, x[7] * qs);
      reinterpret_cast<uint4*>(a.q16 + (size_t(head) * a.T + t) * kD)[lane] = v;
    } else {
      const int kh = is_v ? head - H - KV : head - H, o = pos % kKvChunk;
      uint16_t* cache = is_v ? a.v_cache : a.k_cache;
      const size_t at = (size_t(kh) * a.capacity + size_t(pos - o)) * kD +
                        size_t(is_v ? v_piece(o, lane) : k_piece(o, lane)) * 8;
      *reinterpret_cast<uint4*>(cache + at) =
          make_uint4(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(x[4], x[5]),
                     pack_bf16(x[6], x[7]));
    }
  }
}

constexpr int kRows = 128, kKeys = 64, kWarps = 8, kThreads = kWarps * 32;
constexpr int kChunks = kD / 8;  // 16-byte chunks of a row
constexpr int kQBytes = kRows * kD * 2, kTileBytes = kKeys * kD * 2;
// Q, two stages of K and V tiles, and 1,024 bytes to align the swizzle atoms.
constexpr size_t kSmem = size_t(kQBytes) + 4 * size_t(kTileBytes) + 1024;

// The byte offset of 16-byte chunk q of row r in a tile of `rows` rows: the
// row in 64-dim slabs of `rows` x 128 bytes, chunk q % 8 at (q % 8) ^ (r % 8)
// (wgmma's 128-byte swizzle: K-major for Q and K, MN-major for V).
__device__ __forceinline__ int sw_at(int r, int q, int rows) {
  return (q >> 3) * rows * 128 + r * 128 + (((q & 7) ^ (r & 7)) << 4);
}

// Keys kb .. kb + 63 of KV head kvh into tiles k and v by cp.async;
// positions past the cache are zero.
__device__ __forceinline__ void land(const FlashArgs& a, int kvh, int kb, uint8_t* k, uint8_t* v) {
  for (int i = int(threadIdx.x); i < kKeys * kChunks; i += kThreads) {
    const int key = i / kChunks, q = i % kChunks, p = kb + key;
    const bool ok = p < a.capacity;
    const int pp = ok ? p : 0, o = pp % kKvChunk, at = sw_at(key, q, kKeys);
    const size_t base = (size_t(kvh) * a.capacity + size_t(pp - o)) * kD;
    cp_async16(k + at, a.k_cache + base + size_t(k_piece(o, q)) * 8, ok);
    cp_async16(v + at, a.v_cache + base + size_t(v_piece(o, q)) * 8, ok);
  }
}

__global__ void __launch_bounds__(kThreads, 1) flash_kernel(FlashArgs a) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* qs = smem_raw + (1024 - smem_addr(smem_raw) % 1024) % 1024;
  uint8_t* kv = qs + kQBytes;  // stage s: K at kv + 2 s kTileBytes, V after it
  const int G = a.heads / a.kv_heads, TB = kRows / G;
  const int qt = int(gridDim.x) - 1 - int(blockIdx.x), kvh = int(blockIdx.y);  // heavy tiles first
  const int q0 = qt * TB, tid = int(threadIdx.x), S = int(gridDim.z), split = int(blockIdx.z);
  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks, tq = q0 + r / G, h = kvh * G + r % G;
    const bool ok = tq < a.T;
    cp_async16(qs + sw_at(r, c, kRows), a.q16 + (size_t(h) * a.T + (ok ? tq : 0)) * kD + 8 * c, ok);
  }
  const int last_tok = min(q0 + TB, a.T) - 1, kmax = a.pos0 + last_tok;
  // This block's tiles: all of its keys, or its range of the split.
  const int per = ((a.pos0 + a.T - 1) / kKeys + S) / S;
  const int j0 = split * per, j1 = min(kmax / kKeys + 1, j0 + per);
  if (j0 < j1) land(a, kvh, j0 * kKeys, kv, kv + kTileBytes);
  cp_async_commit();

  // Warpgroup wg takes rows 64 wg ..; warp w of the block rows 16 w + g, + 8.
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3, wg = warp >> 2;
  const int r0 = 16 * warp;
  const int tp0 = a.pos0 + q0 + (r0 + g) / G, tp1 = a.pos0 + q0 + (r0 + g + 8) / G;
  const uint32_t q_at = smem_addr(qs) + uint32_t(wg * 64 * 128);
  float o[kD / 2] = {};  // o[4 d + c]: dims 8 d + 2 t + (c & 1), row g + 8 (c >> 1)
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  for (int j = j0; j < j1; ++j) {
    cp_async_wait<0>();
    wg::fence_smem();
    __syncthreads();  // tile j landed; every warp is done with tile j - 1's stage
    uint8_t* k = kv + ((j - j0) & 1) * 2 * kTileBytes;
    if (j + 1 < j1) {
      uint8_t* nk = kv + ((j + 1 - j0) & 1) * 2 * kTileBytes;
      land(a, kvh, (j + 1) * kKeys, nk, nk + kTileBytes);
    }
    cp_async_commit();
    const int kb = j * kKeys;
    const uint32_t k_at = smem_addr(k), v_at = k_at + uint32_t(kTileBytes);
    // S = Q K^T: 64 rows x 64 keys a warpgroup, 16 dims a step.
    float s[32] = {};
    wg::fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t in_row = uint32_t((kk & 3) * 32), slab = uint32_t(kk >> 2) * 128;
      wg::mma_bf16_ss64(s, wg::sw128_desc(q_at + slab * kRows + in_row),
                        wg::sw128_desc(k_at + slab * kKeys + in_row));
    }
    wg::commit();
    wg::wait<0>();
    wg::fence_operand(s);
    // Causal mask where the tile passes the block's first position.
    if (kb + kKeys - 1 > a.pos0 + q0) {
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kb + 8 * n + 2 * t + (e & 1);
          if (key > (e < 2 ? tp0 : tp1)) s[4 * n + e] = -INFINITY;
        }
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < 8; ++n)
      mx0 = fmaxf(mx0, fmaxf(s[4 * n], s[4 * n + 1])),
      mx1 = fmaxf(mx1, fmaxf(s[4 * n + 2], s[4 * n + 3]));
#pragma unroll
    for (int x = 1; x < 4; x <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(kFull, mx0, x));
      mx1 = fmaxf(mx1, __shfl_xor_sync(kFull, mx1, x));
    }
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    const float u0 = n0 == -INFINITY ? 0.0f : n0, u1 = n1 == -INFINITY ? 0.0f : n1;
    const float c0 = exp2f(m0 - u0), c1 = exp2f(m1 - u1);
    m0 = n0, m1 = n1;
    float p0 = 0.0f, p1 = 0.0f;
    uint32_t pa[8][2];  // P as bf16 pairs: [n-tile][row g, row g + 8]
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const float e0 = exp2f(s[4 * n] - u0), e1 = exp2f(s[4 * n + 1] - u0);
      const float e2 = exp2f(s[4 * n + 2] - u1), e3 = exp2f(s[4 * n + 3] - u1);
      p0 += e0 + e1, p1 += e2 + e3;
      pa[n][0] = pack_bf16(e0, e1), pa[n][1] = pack_bf16(e2, e3);
    }
    l0 = l0 * c0 + p0, l1 = l1 * c1 + p1;
    // The running max rarely moves after the first tiles: rescale only when it
    // did for one of the warp's rows.
    if (__any_sync(kFull, c0 != 1.0f || c1 != 1.0f)) {
#pragma unroll
      for (int d = 0; d < kD / 8; ++d)
        o[4 * d] *= c0, o[4 * d + 1] *= c0, o[4 * d + 2] *= c1, o[4 * d + 3] *= c1;
    }
    // O += P V: 16 keys a step, V's 256 dims as N.
    wg::fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint32_t pk[4] = {pa[2 * kk][0], pa[2 * kk][1], pa[2 * kk + 1][0], pa[2 * kk + 1][1]};
      wg::mma_bf16_rs256_mn(o, pk, wg::sw128_desc(v_at + kk * 16 * 128, kKeys * 128));
    }
    wg::commit();
    wg::wait<0>();
    wg::fence_operand(o);
  }
  cp_async_wait<0>();
#pragma unroll
  for (int x = 1; x < 4; x <<= 1)
    l0 += __shfl_xor_sync(kFull, l0, x), l1 += __shfl_xor_sync(kFull, l1, x);
  // Split: the range's unnormalised sums, max and normaliser (a row with no
  // key in the range keeps -inf, 0 and zero sums).
  const size_t rows = size_t(a.T) * a.heads;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = r0 + g + 8 * half, tq = q0 + r / G, h = kvh * G + r % G;
    if (tq >= a.T) continue;
    const size_t row = size_t(tq) * a.heads + h;
    const float l = half ? l1 : l0, inv = S > 1 ? 1.0f : 1.0f / l;
    float* dst = S > 1 ? a.work + (split * rows + row) * kD : a.out + row * kD;
#pragma unroll
    for (int d = 0; d < kD / 8; ++d)
      *reinterpret_cast<float2*>(dst + 8 * d + 2 * t) =
          make_float2(o[4 * d + 2 * half] * inv, o[4 * d + 2 * half + 1] * inv);
    if (S > 1 && t == 0)
      *reinterpret_cast<float2*>(a.work + S * rows * kD + 2 * (split * rows + row)) =
          make_float2(half ? m1 : m0, l);
  }
}

// The S ranges of a split into out: a block a (token, head), a thread a dim.
__global__ void __launch_bounds__(kD) combine_kernel(FlashArgs a, int S) {
  const size_t rows = size_t(a.T) * a.heads, row = blockIdx.x;
  const float2* ml = reinterpret_cast<const float2*>(a.work + S * rows * kD);
  float m = -INFINITY;
  for (int s = 0; s < S; ++s) m = fmaxf(m, ml[s * rows + row].x);
  float sum = 0.0f, l = 0.0f;
  for (int s = 0; s < S; ++s) {
    const float2 v = ml[s * rows + row];
    if (v.y == 0.0f) continue;  // no key of the range is visible to this row
    const float c = exp2f(v.x - m);
    sum += c * a.work[(s * rows + row) * kD + threadIdx.x], l += c * v.y;
  }
  a.out[row * kD + threadIdx.x] = sum / l;
}

// Ranges for a call (fill_splits), each of at least 4 tiles, within the work
// area. S T <= (2 sms / blocks + 1) T with blocks >= T kv_heads / TB, and T <
// sms TB / kv_heads where it splits: flash_work_floats' 3 sms TB / kv_heads rows.
int flash_splits(const FlashArgs& a) {
  if (a.work == nullptr) return 1;
  const int G = a.heads / a.kv_heads, blocks = (a.T + kRows / G - 1) / (kRows / G) * a.kv_heads;
  const int tiles = (a.pos0 + a.T - 1) / kKeys + 1;
  const size_t fit = a.work_floats / (size_t(a.T) * a.heads * (kD + 2));
  return fill_splits(blocks, std::min(tiles / 4, int(std::min<size_t>(fit, 64))));
}

}  // namespace

cudaError_t attn_prep(const AttnPrepArgs& a, cudaStream_t st) {
  if (a.rotary % 16 != 0 || a.rotary > kD || a.heads <= 0 || a.kv_heads <= 0)
    return cudaErrorInvalidValue;
  if (a.T <= 0) return cudaSuccess;
  prep_kernel<<<a.T, 256, 0, st>>>(a);
  return cudaGetLastError();
}

size_t flash_work_floats(int heads, int kv_heads) {
  const size_t TB = size_t(kRows / std::max(1, heads / std::max(1, kv_heads)));
  return 3 * size_t(sm_count()) * TB / size_t(std::max(1, kv_heads)) * size_t(heads) * (kD + 2);
}

cudaError_t attn_flash(const FlashArgs& a, cudaStream_t st) {
  const int G = a.heads / max(1, a.kv_heads);
  if (a.kv_heads <= 0 || a.heads % a.kv_heads != 0 || kRows % G != 0 || G > 16)
    return cudaErrorInvalidValue;
  if (a.T <= 0) return cudaSuccess;
  if (cudaError_t e = cudaFuncSetAttribute(flash_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem));
      e != cudaSuccess)
    return e;
  const int TB = kRows / G, S = flash_splits(a);
  flash_kernel<<<dim3((a.T + TB - 1) / TB, a.kv_heads, S), kThreads, kSmem, st>>>(a);
  if (S == 1) return cudaGetLastError();
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  combine_kernel<<<unsigned(a.T * a.heads), kD, 0, st>>>(a, S);
  return cudaGetLastError();
}

}  // namespace tern::cuda
