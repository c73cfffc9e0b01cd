// chunk_prep: the chunked delta rule's per-chunk factors (gdn_chunked.cuh's
// scratch), a block per (value head, chunk), every chunk at once. The blocks
// of a key head's value heads are neighbours in the grid, so its q and k come
// from DRAM about once.
//
// In order: the cumulative log-decay gam; the Grams K K^T (three tf32
// products: fp32-level sums, since A feeds the inverse) and Q K^T (one: M is
// stored in fp16); A = beta_r (k_r . k_s) e^(gam_r - gam_s) (s < r) and M;
// T = (I + A)^-1 by blocks of 16 (the four diagonal blocks by substitution,
// then T_ij = -T_ii sum_k A_ik T_kj a block row at a time, in fp32); then
// [U | W] = T [diag(beta) V | diag(beta Gamma) K] on the tensor cores (tf32).
// The old form solved (I + A) X = B by one substitution, a thread a column of
// X: 2016 dependent FMAs a thread, the kernel bound by their latency (130 us a
// layer at 2K tokens on an H100; this one 117, its serial phases ~20 us a
// block: docs/kernels/cuda-prefill.md).
#include "backends/cuda/gdn_chunked.cuh"
#include "backends/cuda/gdn_prefill.h"

namespace tern::cuda::chunked {

namespace {

constexpr int kThreads = 256;
constexpr int kKS = kD + 4;  // q, k rows: a Gram fragment's 32 loads in distinct banks
constexpr int kVS = kD + 8;  // v rows: a B fragment's loads (rows t, columns g) likewise
constexpr int kAS = kC + 4;  // A / T rows
struct PrepSmem {
  float k[kC][kKS], q[kC][kKS], v[kC][kVS];         // A, T and the inverse's partial sums reuse q
  float gam[kC], beta[kC], eq[kC], ek[kC], bq[kC];  // e^gam, e^(gam_C - gam), beta e^gam
};
static_assert(kC * kAS + 3 * 16 * 16 <= kC * kKS, "A, T and the partial sums fit where q was");

// x = hi + lo, both tf32 (lo carries the next 11 bits).
__device__ __forceinline__ void split_tf32(float x, float& hi, float& lo) {
  hi = tf32(x);
  lo = tf32(x - hi);
}

// d += a b in three tf32 products, the small ones first (lo lo dropped).
__device__ __forceinline__ void mma_tf32x3(float (&d)[4], const float (&ah)[4],
                                           const float (&al)[4], const float (&bh)[2],
                                           const float (&bl)[2]) {
  mma_tf32(d, al[0], al[1], al[2], al[3], bh[0], bh[1]);
  mma_tf32(d, ah[0], ah[1], ah[2], ah[3], bl[0], bl[1]);
  mma_tf32(d, ah[0], ah[1], ah[2], ah[3], bh[0], bh[1]);
}

// Rows of fp32 [kC][ld] as swizzled fp16 [kC][128] at dst, a 16-byte piece a thread.
__device__ __forceinline__ void store_rows_f16(uint8_t* dst, const float* src, int ld) {
  for (int i = int(threadIdx.x); i < kC * kD / 8; i += kThreads) {
    const int r = i / (kD / 8), c = 8 * (i % (kD / 8));
    const float* x = src + r * ld + c;
    uint4 p;
    __half2* h = reinterpret_cast<__half2*>(&p);
#pragma unroll
    for (int e = 0; e < 4; ++e) h[e] = __floats2half2_rn(x[2 * e], x[2 * e + 1]);
    *reinterpret_cast<uint4*>(dst + swz(r, c, kRowH)) = p;
  }
}

__global__ void __launch_bounds__(kThreads) chunk_prep_kernel(DeltaArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  PrepSmem& s = *reinterpret_cast<PrepSmem*>(smem);
  const int n = int(blockIdx.x), c = int(blockIdx.y), tid = int(threadIdx.x);
  const int Hk = a.k_heads, Hv = a.v_heads, R = Hv / Hk, m = n / R, t0 = c * kC;
  const int L = min(kC, a.T - t0), chunks = (a.T + kC - 1) / kC;
  uint8_t* rec = reinterpret_cast<uint8_t*>(a.scratch) + (size_t(c) * Hv + n) * kVRec;
  uint8_t* krec = reinterpret_cast<uint8_t*>(a.scratch) + size_t(chunks) * Hv * kVRec +
                  (size_t(c) * Hk + m) * kKRec;
  // q, k and v by cp.async, all in flight at once; rows past L zeros.
  for (int i = tid; i < kC * kD / 4; i += kThreads) {
    const int r = i / (kD / 4), d = 4 * (i % (kD / 4));
    const bool ok = r < L;
    const size_t t = size_t(t0 + (ok ? r : 0));
    cp_async16(&s.k[r][d], a.k + (t * Hk + m) * kD + d, ok);
    cp_async16(&s.q[r][d], a.q + (t * Hk + m) * kD + d, ok);
    cp_async16(&s.v[r][d], a.v + (t * Hv + n) * kD + d, ok);
  }
  cp_async_commit();
  if (tid < 32) {  // gam: an inclusive scan, two tokens a lane (padding: g = 0, beta = 0)
    const int r = 2 * tid;
    const float g0 = r < L ? a.g[size_t(t0 + r) * Hv + n] : 0.0f;
    const float g1 = r + 1 < L ? a.g[size_t(t0 + r + 1) * Hv + n] : 0.0f;
    float x = g0 + g1;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float y = __shfl_up_sync(kFull, x, o);
      if (tid >= o) x += y;
    }
    s.gam[r] = x - g1, s.gam[r + 1] = x;
    const float gl = __shfl_sync(kFull, x, 31);
    float* F = reinterpret_cast<float*>(rec + kFo);
#pragma unroll
    for (int i = r; i < r + 2; ++i) {
      s.beta[i] = i < L ? a.beta[size_t(t0 + i) * Hv + n] : 0.0f;
      s.eq[i] = expf(s.gam[i]), s.ek[i] = expf(gl - s.gam[i]);
      s.bq[i] = s.beta[i] * s.eq[i];
      F[i] = s.eq[i], F[kC + i] = s.ek[i];
    }
    if (tid < kF - 2 * kC) F[2 * kC + tid] = tid == 0 ? expf(gl) : 0.0f;
  }
  cp_async_wait<0>();
  __syncthreads();
  // The Grams: warp w has 16 rows by columns 32 (w / 4).. of both, as 4 tiles
  // of 8 columns; tiles wholly above the diagonal stay zero. Rows 16 w.. for
  // w < 4, else 16 (7 - w).., so a scheduler's two warps (w, w + 4) have at
  // most 6 tiles between them.
  const int lane = tid & 31, warp = tid >> 5, g8 = lane >> 2, t4 = lane & 3;
  const int m0 = 16 * (warp < 4 ? warp : 7 - warp), n0 = 32 * (warp / 4);
  float kk[4][4] = {}, qk[4][4] = {};  // [tile][fragment]
  for (int k0 = 0; k0 < kD; k0 += 8) {
    float kh[4], kl[4], qh[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = m0 + g8 + 8 * (e & 1), col = k0 + t4 + 4 * (e >> 1);
      split_tf32(s.k[r][col], kh[e], kl[e]);
      qh[e] = tf32(s.q[r][col]);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (n0 + 8 * j > m0 + 15) continue;
      const int nr = n0 + 8 * j + g8;
      float bh[2], bl[2];
      split_tf32(s.k[nr][k0 + t4], bh[0], bl[0]);
      split_tf32(s.k[nr][k0 + t4 + 4], bh[1], bl[1]);
      mma_tf32x3(kk[j], kh, kl, bh, bl);
      mma_tf32(qk[j], qh[0], qh[1], qh[2], qh[3], bh[0], bh[1]);
    }
  }
  // Q and K once a key head, in fp16, by its first value head's blocks.
  if (n % R == 0) {
    store_rows_f16(krec + kQ, &s.q[0][0], kKS);
    store_rows_f16(krec + kK, &s.k[0][0], kKS);
  }
  __syncthreads();  // q and k are read
  // A (fp32, where q was) and M (fp16, to the scratch) from the Grams;
  // masked before the exponent: e^(gam_r - gam_s) only for s <= r.
  float* A = &s.q[0][0];  // [kC][kAS]
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = m0 + g8 + 8 * h, col = n0 + 8 * j + 2 * t4;
      float mv[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int sc = col + e;
        const float dec = sc <= r ? expf(s.gam[r] - s.gam[sc]) : 0.0f;
        A[r * kAS + sc] = sc < r ? s.beta[r] * kk[j][2 * h + e] * dec : 0.0f;
        mv[e] = qk[j][2 * h + e] * dec;
      }
      *reinterpret_cast<__half2*>(rec + kM + swz(r, col, 2 * kC)) = __floats2half2_rn(mv[0], mv[1]);
    }
  // The right-hand sides in place, rounded to tf32 once: diag(beta Gamma) K, diag(beta) V.
  for (int i = tid; i < kC * kD; i += kThreads) {
    const int r = i / kD, d = i % kD;
    s.k[r][d] = tf32(s.bq[r] * s.k[r][d]);
    s.v[r][d] = tf32(s.beta[r] * s.v[r][d]);
  }
  __syncthreads();
  // T = (I + A)^-1. The diagonal blocks: thread (block i, column cc) solves
  // (I + A_ii) x = e_cc, then writes x over A_ii once every thread has read it.
  {
    const int i = tid / 16, cc = tid % 16;
    float x[16];
    if (tid < 64) {
#pragma unroll
      for (int rr = 0; rr < 16; ++rr) {
        float b = rr == cc ? 1.0f : 0.0f;
        const float* ar = A + (16 * i + rr) * kAS + 16 * i;
#pragma unroll
        for (int q = 0; q < rr; ++q) b = fmaf(-ar[q], x[q], b);
        x[rr] = b;
      }
    }
    __syncthreads();
    if (tid < 64)
#pragma unroll
      for (int rr = 0; rr < 16; ++rr) A[(16 * i + rr) * kAS + 16 * i + cc] = x[rr];
    __syncthreads();
  }
  // Block rows 1..3: X_j = sum_{k = j}^{i - 1} A_ik T_kj, then T_ij = -T_ii X_j
  // (over A_ij, read by then; T_ii's zeros above the diagonal included),
  // thread (row rr, column cc) of each block, the j sums interleaved.
  {
    float* X = A + kC * kAS;  // [3][16][16]
    const int rr = tid / 16, cc = tid % 16;
#pragma unroll
    for (int i = 1; i < 4; ++i) {
      const float* ar = A + (16 * i + rr) * kAS;
      float xs[3] = {};
#pragma unroll
      for (int q = 0; q < 16 * i; ++q)
#pragma unroll
        for (int j = 0; j <= q / 16; ++j) xs[j] = fmaf(ar[q], A[q * kAS + 16 * j + cc], xs[j]);
#pragma unroll
      for (int j = 0; j < i; ++j) X[j * 256 + rr * 16 + cc] = xs[j];
      __syncthreads();
      float ts[3] = {};
#pragma unroll
      for (int q = 0; q < 16; ++q)
#pragma unroll
        for (int j = 0; j < i; ++j) ts[j] = fmaf(ar[16 * i + q], X[j * 256 + q * 16 + cc], ts[j]);
#pragma unroll
      for (int j = 0; j < i; ++j) A[(16 * i + rr) * kAS + 16 * j + cc] = -ts[j];
      __syncthreads();
    }
  }
  // [U | W] = T [beta V | beta Gamma K]: warp w has the rows of block i and
  // U (w < 4) or W (w >= 4); blocks paired so each scheduler's two warps
  // take 10 of T's k steps between them (T is lower triangular).
  const int bi = warp < 4 ? warp : 7 - warp;
  const bool is_w = warp >= 4;
  const float* B = is_w ? &s.k[0][0] : &s.v[0][0];
  const int ldb = is_w ? kKS : kVS;
  float x[16][4] = {};
  for (int k0 = 0; k0 < 16 * (bi + 1); k0 += 8) {
    const float* tr = A + (16 * bi + g8) * kAS + k0 + t4;
    const float a0 = tf32(tr[0]), a1 = tf32(tr[8 * kAS]), a2 = tf32(tr[4]),
                a3 = tf32(tr[8 * kAS + 4]);
    const float* br = B + (k0 + t4) * ldb + g8;
#pragma unroll
    for (int q = 0; q < 16; ++q) mma_tf32(x[q], a0, a1, a2, a3, br[8 * q], br[8 * q + 4 * ldb]);
  }
  float* U = reinterpret_cast<float*>(rec + kU);
#pragma unroll
  for (int q = 0; q < 16; ++q)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * bi + g8 + 8 * h, col = 8 * q + 2 * t4;
      const float v0 = x[q][2 * h], v1 = x[q][2 * h + 1];
      if (is_w)
        *reinterpret_cast<__half2*>(rec + kW + swz(r, col, kRowH)) = __floats2half2_rn(v0, v1);
      else
        *reinterpret_cast<float2*>(U + (col / kCols) * (kC * kCols) + u_at(r, col % kCols)) =
            make_float2(v0, v1);
    }
}

}  // namespace

}  // namespace tern::cuda::chunked

namespace tern::cuda {

cudaError_t gdn_chunk_prep(const DeltaArgs& a, cudaStream_t st) {
  using chunked::kC;
  if (a.k_heads <= 0 || a.v_heads % a.k_heads != 0 || a.scratch == nullptr)
    return cudaErrorInvalidValue;
  if (a.T <= 0) return cudaSuccess;
  const int chunks = (a.T + kC - 1) / kC;
  constexpr size_t smem = sizeof(chunked::PrepSmem);
  if (cudaError_t e = cudaFuncSetAttribute(chunked::chunk_prep_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      e != cudaSuccess)
    return e;
  chunked::chunk_prep_kernel<<<dim3(a.v_heads, chunks), chunked::kThreads, smem, st>>>(a);
  return cudaGetLastError();
}

}  // namespace tern::cuda
