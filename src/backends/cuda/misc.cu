// The step's ends: embedding lookup (dequantised bit-exactly as the CPU),
// arg-max token choice with the hand-off into the next step's input, and the
// random fills behind --dummy weights and synthetic contexts.
#include "backends/cuda/common.cuh"
#include "backends/cuda/misc.h"
#include "backends/cuda/rows.h"
#include "core/rng.h"

namespace tern::cuda {

namespace {

// Column i of embedding row `row`, dequantised as the CPU does (two roundings).
__device__ __forceinline__ float embed_value(const DMat& E, size_t row, int i) {
  const int per = 32 / E.bits, G = E.cols / kGroup;
  const uint32_t word = E.w[row * size_t(E.cols / per) + i / per];
  const uint32_t q = (word >> (E.bits * (i % per))) & ((1u << E.bits) - 1);
  const uint32_t sb = E.sb[row * G + i / kGroup];
  return __fadd_rn(__fmul_rn(sb_scale(sb), float(q)), sb_bias(sb));
}

// P: EmbedArgs, or RowArgs of them.
template <typename P>
__global__ void embed_kernel(const __grid_constant__ P p) {
  const EmbedArgs& a = args_of(p);
  pdl_launch_dependents();
  pdl_wait();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < a.E.cols) a.h[i] = embed_value(a.E, size_t(*a.token), i);
}

// Row t of h from token t (prefill): a block a row.
__global__ void embed_rows_kernel(DMat E, const int* tokens, float* h) {
  const size_t t = blockIdx.x, row = size_t(tokens[t]);
  for (int i = int(threadIdx.x); i < E.cols; i += int(blockDim.x))
    h[t * E.cols + i] = embed_value(E, row, i);
}

constexpr int kThreads = 256, kBlocks = 132;

__device__ __forceinline__ bool better(float v, int i, float v2, int i2) {
  return v2 > v || (v2 == v && i2 < i);
}

// P: ArgmaxArgs, or RowArgs of them.
template <typename P>
__global__ void __launch_bounds__(kThreads) argmax_kernel(const __grid_constant__ P p) {
  const ArgmaxArgs& a = args_of(p);
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float sv[kThreads / 32];
  __shared__ int si[kThreads / 32];
  float v = -INFINITY;
  int bi = INT32_MAX;
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < a.n; i += gridDim.x * kThreads)
    if (better(v, bi, a.logits[i], i)) v = a.logits[i], bi = i;
  auto reduce = [&] {
    for (int o = 16; o > 0; o >>= 1) {
      const float v2 = __shfl_xor_sync(kFull, v, o);
      const int i2 = __shfl_xor_sync(kFull, bi, o);
      if (better(v, bi, v2, i2)) v = v2, bi = i2;
    }
    if ((threadIdx.x & 31) == 0) sv[threadIdx.x >> 5] = v, si[threadIdx.x >> 5] = bi;
    __syncthreads();
    v = sv[0], bi = si[0];
    for (int w = 1; w < kThreads / 32; ++w)
      if (better(v, bi, sv[w], si[w])) v = sv[w], bi = si[w];
    __syncthreads();
  };
  reduce();
  if (threadIdx.x == 0) {
    a.scratch[2 * blockIdx.x] = v;
    a.scratch[2 * blockIdx.x + 1] = __int_as_float(bi);
  }
  if (!last_block(a.counter)) return;
  v = -INFINITY, bi = INT32_MAX;
  for (int b = threadIdx.x; b < int(gridDim.x); b += kThreads) {
    const float v2 = __ldcg(a.scratch + 2 * b);
    const int i2 = __float_as_int(__ldcg(a.scratch + 2 * b + 1));
    if (better(v, bi, v2, i2)) v = v2, bi = i2;
  }
  reduce();
  if (threadIdx.x == 0) hand_off(a, bi);
}

__device__ __forceinline__ float unit(uint64_t seed, size_t i) {
  return float(splitmix64(seed ^ splitmix64(i)) >> 40) * (1.0f / 16777216.0f);
}

__global__ void fill_u32_kernel(uint32_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = uint32_t(splitmix64(seed ^ splitmix64(i)));
}

__global__ void fill_bf16_kernel(uint16_t* p, size_t n, float lo, float hi, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(lo + (hi - lo) * unit(seed, i)));
}

__global__ void fill_scale_bias_kernel(uint32_t* p, size_t n, float s_lo, float s_hi, float b_lo,
                                       float b_hi, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float s = s_lo + (s_hi - s_lo) * unit(seed, 2 * i),
                b = b_lo + (b_hi - b_lo) * unit(seed, 2 * i + 1);
    p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(s)) |
           uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(b))) << 16;
  }
}

__global__ void fill_f32_kernel(float* p, size_t n, float lo, float hi, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = lo + (hi - lo) * unit(seed, i);
}

// Thread per 16-byte piece of the tile layout (layout.h): pieces 0-31 of a
// round are lanes' codes of rows g, 32-63 of rows g + 8, 64-71 the words.
__global__ void to_tiles_kernel(DMat m, uint4* out, int pair, size_t pieces) {
  constexpr int kPieces = kTileRoundBytes / 16;
  const int rounds = m.cols / kTileRound;
  const uint4* w = reinterpret_cast<const uint4*>(m.w);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < pieces;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t T = i / (size_t(rounds) * kPieces);
    const int r = int(i / kPieces % rounds), p = int(i % kPieces);
    auto row = [&](int k) -> size_t {
      if (pair == 0) return T * 16 + size_t(k);
      const size_t e = T / size_t(pair / 8), q = T % size_t(pair / 8);
      return e * 2 * pair + (k < 8 ? 0 : pair) + q * 8 + size_t(k % 8);
    };
    uint4 v = make_uint4(0, 0, 0, 0);
    if (p < 64) {
      const size_t R = row(p % 32 / 4 + (p < 32 ? 0 : 8));
      if (R < size_t(m.rows)) v = w[R * (m.cols / 32) + size_t(4 * r + p % 4)];
    } else {
      uint32_t x[4];
      for (int j = 0; j < 4; ++j) {
        const int word = (p - 64) * 4 + j;
        const size_t R = row(word / 2);
        x[j] = R < size_t(m.rows) ? m.sb[R * (m.cols / kGroup) + size_t(2 * r + word % 2)] : 0u;
      }
      v = make_uint4(x[0], x[1], x[2], x[3]);
    }
    out[i] = v;
  }
}

__global__ void mask_logits_kernel(float* logits, const uint32_t* words, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && !((words[i >> 5] >> (i & 31)) & 1u)) logits[i] = -INFINITY;
}

}  // namespace

cudaError_t to_tiles(const DMat& m, uint8_t* out, int pair, cudaStream_t st) {
  if (!tileable(m) || m.w == nullptr || (pair > 0 && (pair % 8 != 0 || m.rows % (2 * pair) != 0)))
    return cudaErrorInvalidValue;
  to_tiles_kernel<<<1024, 256, 0, st>>>(m, reinterpret_cast<uint4*>(out), pair,
                                        tiled_bytes(m) / 16);
  return cudaGetLastError();
}

cudaError_t embed(const DMat& E, const int* token, float* h, cudaStream_t st) {
  return launch_pdl(embed_kernel<EmbedArgs>, dim3((E.cols + 255) / 256), dim3(256), 0, st,
                    EmbedArgs{E, token, h});
}

cudaError_t embed_each(const EmbedArgs* rows, int n, cudaStream_t st) {
  if (!rows_fit(n)) return cudaErrorInvalidValue;
  return launch_pdl(embed_kernel<RowArgs<EmbedArgs>>,
                    dim3((rows[0].E.cols + 255) / 256, 1, unsigned(n)), dim3(256), 0, st,
                    row_args(rows, n));
}

cudaError_t embed_rows(const DMat& E, const int* tokens, int T, float* h, cudaStream_t st) {
  if (T <= 0) return cudaSuccess;
  embed_rows_kernel<<<T, 256, 0, st>>>(E, tokens, h);
  return cudaGetLastError();
}

cudaError_t mask_logits(float* logits, const uint32_t* words, int n, cudaStream_t st) {
  mask_logits_kernel<<<(n + 255) / 256, 256, 0, st>>>(logits, words, n);
  return cudaGetLastError();
}

cudaError_t argmax_advance(const ArgmaxArgs& a, cudaStream_t st) {
  return launch_pdl(argmax_kernel<ArgmaxArgs>, dim3(kBlocks), dim3(kThreads), 0, st, a);
}

cudaError_t argmax_advance_rows(const ArgmaxArgs* rows, int n, cudaStream_t st) {
  if (!rows_fit(n)) return cudaErrorInvalidValue;
  return launch_pdl(argmax_kernel<RowArgs<ArgmaxArgs>>, dim3(kBlocks, 1, unsigned(n)),
                    dim3(kThreads), 0, st, row_args(rows, n));
}

cudaError_t fill_u32(uint32_t* p, size_t n, uint64_t seed, cudaStream_t st) {
  fill_u32_kernel<<<1024, 256, 0, st>>>(p, n, seed);
  return cudaGetLastError();
}

cudaError_t fill_bf16(uint16_t* p, size_t n, float lo, float hi, uint64_t seed, cudaStream_t st) {
  fill_bf16_kernel<<<1024, 256, 0, st>>>(p, n, lo, hi, seed);
  return cudaGetLastError();
}

cudaError_t fill_scale_bias(uint32_t* p, size_t n, float s_lo, float s_hi, float b_lo, float b_hi,
                            uint64_t seed, cudaStream_t st) {
  fill_scale_bias_kernel<<<1024, 256, 0, st>>>(p, n, s_lo, s_hi, b_lo, b_hi, seed);
  return cudaGetLastError();
}

cudaError_t fill_f32(float* p, size_t n, float lo, float hi, uint64_t seed, cudaStream_t st) {
  fill_f32_kernel<<<1024, 256, 0, st>>>(p, n, lo, hi, seed);
  return cudaGetLastError();
}

}  // namespace tern::cuda
