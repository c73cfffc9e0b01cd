// Gated DeltaNet prefill, the chunked (WY / UT) form of the delta rule
// (docs/model.md §DeltaNet chunked), 64 tokens a chunk, in two kernels:
//
// chunk_prep, a block per (chunk, value head), every chunk at once: the
// in-chunk cumulative log-decay gam, the Grams K K^T and Q K^T (tensor cores,
// three tf32 products each: fp32-level sums; fp32 FMAs before, 187 against
// 176 us a layer at 2K tokens), A = beta_r (k_r . k_s) e^(gam_r - gam_s)
// (s < r), and the forward substitution (I + A) X = [diag(beta) V |
// diag(beta Gamma) K] with a thread per column of X keeping its 64 entries in
// registers (no barrier in the solve; A comes by broadcast loads). It writes
// U, W = the two halves of X, Q~ = diag(Gamma) Q, K~ = diag(e^(gam_C - gam)) K,
// M = (Q K^T) o D (s <= r) and Gamma_C to the scratch: W, Q~, K~ and M in
// fp16, U (values, of any size) in fp32. The fp16 ones are operands of tf32
// products, whose 10 mantissa bits fp16 holds exactly, and small (q and k
// unit-norm, decays <= 1, W the WY factor of a product of contractions), so
// only their range shrinks: entries under 2^-14 keep fewer bits, an absolute
// error under 2^-25. Fewer bytes: the scratch was
// 148 KB a (chunk, head), written once and read by four chunk_state blocks.
//
// chunk_state, a block per (value head, 32 state columns), sequential over the
// chunks, on tensor cores (mma m16n8k8 tf32, fp32 sums): per chunk
//   V' = U - W S,   O = Q~ S + M V',   S = Gamma_C S + K~^T V'.
// S (128 x 32) lives in the warps' accumulators for the whole call (warp w:
// rows 16 w..), with a tf32 copy in shared memory as the operand of W S and
// Q~ S. The operands are rounded to tf32 (10 explicit mantissa bits; the fp16
// ones convert exactly); every sum is fp32.
#include "backends/cuda/common.cuh"
#include "backends/cuda/gdn_prefill.h"
#include "backends/cuda/layout.h"

namespace tern::cuda {

namespace {

constexpr int kD = kGdnDim, kC = 64;
constexpr int kPrepThreads = 256;
// Scratch per (chunk, head), byte offsets: W, Q~, K~ fp16 [64][128], M fp16
// [64][64], U fp32 [64][128], Gamma_C (+pad).
constexpr size_t kH = sizeof(__half), kW = 0, kQ = kW + kC * kD * kH, kK = kQ + kC * kD * kH,
                 kM = kK + kC * kD * kH, kU = kM + kC * kC * kH, kG = kU + kC * kD * sizeof(float),
                 kPer = kG + 256;
static_assert(kPer % 16 == 0 && kU % 16 == 0 && kM % 16 == 0, "16-byte pieces");

__device__ __forceinline__ float tf32(float x) {
  uint32_t u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
  return __uint_as_float(u);
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], float a0, float a1, float a2, float a3,
                                         float b0, float b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(__float_as_uint(a0)), "r"(__float_as_uint(a1)), "r"(__float_as_uint(a2)),
        "r"(__float_as_uint(a3)), "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}

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

constexpr int kKS = kD + 4;  // Gram operands: a fragment's 32 loads in distinct banks
constexpr int kAS = 68;      // A: 16-byte row loads
struct PrepSmem {
  float k[kC][kKS], q[kC][kKS], v[kC][kD];  // A and M reuse q once the Grams are done
  float gam[kC], beta[kC];
  // Per row, once (were per element: ~10 instructions each): e^gam, e^(gam_C - gam), beta e^gam.
  float eq[kC], ek[kC], bq[kC];
};

__global__ void __launch_bounds__(kPrepThreads) chunk_prep_kernel(DeltaArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  PrepSmem& s = *reinterpret_cast<PrepSmem*>(smem);
  const int c = int(blockIdx.x), n = int(blockIdx.y), tid = int(threadIdx.x);
  const int Hk = a.k_heads, Hv = a.v_heads, m = n / (Hv / Hk), t0 = c * kC;
  const int L = min(kC, a.T - t0);
  uint8_t* out = reinterpret_cast<uint8_t*>(a.scratch) + (size_t(c) * Hv + n) * kPer;
  __half *oW = reinterpret_cast<__half*>(out + kW), *oQ = reinterpret_cast<__half*>(out + kQ),
         *oK = reinterpret_cast<__half*>(out + kK), *oM = reinterpret_cast<__half*>(out + kM);
  float* oU = reinterpret_cast<float*>(out + kU);
  // q, k and v by cp.async, all in flight at once (plain loads through
  // registers left most of a block's time waiting: 139 against 155 us a layer
  // at 2K in ncu); rows past L zeros.
  for (int i = tid; i < kC * kD / 4; i += kPrepThreads) {
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
    s.beta[r] = r < L ? a.beta[size_t(t0 + r) * Hv + n] : 0.0f;
    s.beta[r + 1] = r + 1 < L ? a.beta[size_t(t0 + r + 1) * Hv + n] : 0.0f;
    const float gl = __shfl_sync(kFull, x, 31);
#pragma unroll
    for (int i = r; i < r + 2; ++i) {
      s.eq[i] = expf(s.gam[i]), s.ek[i] = expf(gl - s.gam[i]);
      s.bq[i] = s.beta[i] * s.eq[i];
    }
  }
  cp_async_wait<0>();
  __syncthreads();
  // Grams on the tensor cores, in three tf32 products (hi hi + hi lo + lo hi
  // of each operand's split: near-fp32 sums): warp w has rows 16 (w % 4)..
  // by columns 32 (w / 4).. of both, as 4 tiles of 8 columns.
  const int lane = tid & 31, warp = tid >> 5, g8 = lane >> 2, t4 = lane & 3;
  const int m0 = 16 * (warp % 4), n0 = 32 * (warp / 4);
  float kk[4][4] = {}, qk[4][4] = {};  // [tile][fragment]
  for (int k0 = 0; k0 < kD; k0 += 8) {
    float kh[4], kl[4], qh[4], ql[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = m0 + g8 + 8 * (e & 1), c = k0 + t4 + 4 * (e >> 1);
      split_tf32(s.k[r][c], kh[e], kl[e]);
      split_tf32(s.q[r][c], qh[e], ql[e]);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + 8 * j + g8;
      float bh[2], bl[2];
      split_tf32(s.k[n][k0 + t4], bh[0], bl[0]);
      split_tf32(s.k[n][k0 + t4 + 4], bh[1], bl[1]);
      mma_tf32x3(kk[j], kh, kl, bh, bl);
      mma_tf32x3(qk[j], qh, ql, bh, bl);
    }
  }
  // Q~ and K~ out while q is still there, two columns a thread.
  const float gl = s.gam[kC - 1];
  for (int i = 2 * tid; i < kC * kD; i += 2 * kPrepThreads) {
    const int r = i / kD, d = i % kD;
    const float eq = s.eq[r], ek = s.ek[r];
    reinterpret_cast<__half2*>(oQ)[i / 2] = __floats2half2_rn(eq * s.q[r][d], eq * s.q[r][d + 1]);
    reinterpret_cast<__half2*>(oK)[i / 2] = __floats2half2_rn(ek * s.k[r][d], ek * s.k[r][d + 1]);
  }
  if (tid == 0) *reinterpret_cast<float*>(out + kG) = expf(gl);
  __syncthreads();
  float* A = &s.q[0][0];  // [kC][kAS]
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = m0 + g8 + 8 * (e >> 1), q = n0 + 8 * j + 2 * t4 + (e & 1);
      // Masked before the exponent: e^(gam_r - gam_s) only for s <= r.
      const float dec = q <= r ? expf(s.gam[r] - s.gam[q]) : 0.0f;
      A[r * kAS + q] = q < r ? s.beta[r] * kk[j][e] * dec : 0.0f;
      oM[r * kC + q] = __float2half_rn(qk[j][e] * dec);
    }
  __syncthreads();
  // Forward substitution, thread j a column of X = [U | W].
  const int j = tid;
  float x[kC];
#pragma unroll
  for (int r = 0; r < kC; ++r) {
    float b = j < kD ? s.beta[r] * s.v[r][j] : s.bq[r] * s.k[r][j - kD];
    const float4* ar = reinterpret_cast<const float4*>(A + r * kAS);
#pragma unroll
    for (int q4 = 0; q4 < r / 4 + 1; ++q4) {
      const float4 av = ar[q4];
      const float al[4] = {av.x, av.y, av.z, av.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (4 * q4 + e < r) b = fmaf(-al[e], x[4 * q4 + e], b);
    }
    x[r] = b;
    if (j < kD)
      oU[r * kD + j] = b;
    else
      oW[r * kD + j - kD] = __float2half_rn(b);
  }
}

// chunk_state's shared memory, rows padded so the fragment loads of each
// operand fall in distinct banks: the fp16 operands W, Q~, K~ (two buffers)
// and M in rows of 68 and 36 words (ldmatrix's 8 rows in distinct 16-byte
// pieces of the banks), U, V' and S in fp32, V' and S (the B operands) in
// rows of 36 (tile_mma's loads of rows 2 t and 2 t + 1 in distinct banks).
// Byte offsets.
constexpr int kCols = 32, kWS = kD + 8, kMS = kC + 8, kVS = kCols + 4;  // elements a row
constexpr int kSmW = 0, kSmQ = kSmW + 2 * kC * kWS, kSmK = kSmQ + 2 * kC * kWS,
              kSmK2 = kSmK + 2 * kC * kWS, kSmM = kSmK2 + 2 * kC * kWS, kSmU = kSmM + 2 * kC * kMS,
              kSmV = kSmU + 4 * kC * kCols, kSmS = kSmV + 4 * kC * kVS,
              kSmTotal = kSmS + 4 * kD * kVS;
constexpr int kStateThreads = 256;

// Rows of `bytes` (a multiple of 16) from src (row stride ld bytes) to dst
// (stride dst_ld bytes), by cp.async.
__device__ __forceinline__ void copy_rows(uint8_t* dst, int dst_ld, const uint8_t* src, int ld,
                                          int rows, int bytes) {
  const int per = bytes / 16;
  for (int i = int(threadIdx.x); i < rows * per; i += kStateThreads) {
    const int r = i / per, p = i % per;
    cp_async16(dst + r * dst_ld + 16 * p, src + size_t(r) * ld + 16 * p);
  }
}

// Four 8 x 8 fp16 matrices from shared memory (lane l gives the address of row
// l % 8 of matrix l / 8), as ldmatrix hands them out: lane (g, t) gets row g's
// columns 2 t, 2 t + 1 of each (kTrans: of each one transposed).
template <bool kTrans>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __half* p) {
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// acc[q] += A (16 rows from row0) . B (column tiles cb + q, 8 columns each)
// over K = 8 KSTEPS (even): A fp16, row-major with stride lda (or, kTransA,
// stored transposed: element (r, k) at A[k lda + r]), B fp32 k-major with
// stride ldb. A comes by ldmatrix, two k steps of a 16-row tile an
// instruction (scalar loads were most of the kernel's shared-memory issue);
// the mma's k slots t and t + 4 of a step are then columns 2 t and 2 t + 1
// (the contraction's order is free), and B is read in that order.
template <int KSTEPS, int NQ, bool kTransA = false>
__device__ __forceinline__ void tile_mma(float (&acc)[NQ][4], const __half* A, int lda, int row0,
                                         const float* B, int ldb, int cb) {
  static_assert(KSTEPS % 2 == 0, "k steps in pairs");
  const int lane = int(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
  // This lane's row address: matrix lane / 8 is rows + 8 (m & 1), k step + (m >> 1).
  const int j = lane & 7, mi = lane >> 3, r = row0 + 8 * (mi & 1), kq = 8 * (mi >> 1);
  const __half* base = kTransA ? A + (kq + j) * lda + r : A + (r + j) * lda + kq;
#pragma unroll
  for (int kk = 0; kk < KSTEPS; kk += 2) {
    uint32_t f[4];
    ldsm_x4<kTransA>(f, base + (kTransA ? 8 * kk * lda : 8 * kk));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Rows g and g + 8, columns 2 t and 2 t + 1 of k step kk + h.
      const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&f[2 * h]));
      const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&f[2 * h + 1]));
      const float* br = B + (8 * (kk + h) + 2 * t) * ldb + g;
#pragma unroll
      for (int q = 0; q < NQ; ++q)
        mma_tf32(acc[q], lo.x, hi.x, lo.y, hi.y, br[8 * (cb + q)], br[8 * (cb + q) + ldb]);
    }
  }
}

// Calls f(row, column, value) for each accumulator of tiles cb.. of rows row0..
template <int NQ, typename F>
__device__ __forceinline__ void each_acc(float (&acc)[NQ][4], int row0, int cb, F&& f) {
  const int lane = int(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int q = 0; q < NQ; ++q)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      f(row0 + g + (e >= 2 ? 8 : 0), 8 * (cb + q) + 2 * t + (e & 1), acc[q][e]);
}

__global__ void __launch_bounds__(kStateThreads, 1) chunk_state_kernel(DeltaArgs a) {
  extern __shared__ __align__(16) uint8_t sm[];
  const auto* Ws = reinterpret_cast<const __half*>(sm + kSmW);
  const auto* Qs = reinterpret_cast<const __half*>(sm + kSmQ);
  const auto* Ms = reinterpret_cast<const __half*>(sm + kSmM);
  float *Us = reinterpret_cast<float*>(sm + kSmU), *Vp = reinterpret_cast<float*>(sm + kSmV),
        *Ss = reinterpret_cast<float*>(sm + kSmS);
  auto Kb = [&](int c) { return sm + (c & 1 ? kSmK2 : kSmK); };  // K~ of chunk c
  const int n = int(blockIdx.x) / (kD / kCols), c0 = int(blockIdx.x) % (kD / kCols) * kCols;
  const int Hv = a.v_heads, chunks = (a.T + kC - 1) / kC, w = int(threadIdx.x) >> 5;
  auto chunk = [&](int c) {
    return reinterpret_cast<const uint8_t*>(a.scratch) + (size_t(c) * Hv + n) * kPer;
  };
  // Each operand's loads for chunk c + 1 start once chunk c's last reader is
  // past a barrier: W, U and K~ (double-buffered) after step 1, Q~ and M after
  // step 2, so none waits in full at the chunk's end.
  constexpr int kRowH = kD * 2;  // bytes of an fp16 row of 128
  auto load_wuk = [&](int c) {
    copy_rows(sm + kSmW, 2 * kWS, chunk(c) + kW, kRowH, kC, kRowH);
    copy_rows(sm + kSmU, 4 * kCols, chunk(c) + kU + 4 * c0, 4 * kD, kC, 4 * kCols);
    copy_rows(Kb(c), 2 * kWS, chunk(c) + kK, kRowH, kC, kRowH);
  };
  auto load_qm = [&](int c) {
    copy_rows(sm + kSmQ, 2 * kWS, chunk(c) + kQ, kRowH, kC, kRowH);
    copy_rows(sm + kSmM, 2 * kMS, chunk(c) + kM, 2 * kC, kC, 2 * kC);
  };
  load_wuk(0);
  load_qm(0);
  cp_async_commit();
  // The state: warp w's rows 16 w.. by all 32 columns (4 tiles), in registers.
  float* Sg = a.S + size_t(n) * kD * kD + c0;
  float st[4][4];
  each_acc(st, 16 * w, 0, [&](int r, int col, float& v) {
    v = Sg[size_t(r) * kD + col];
    Ss[r * kVS + col] = tf32(v);
  });
  cp_async_wait<0>();
  __syncthreads();
  const int mt = 16 * (w % 4), nb = 2 * (w / 4);  // steps 1 and 2: token rows mt.., tiles nb, nb+1
  for (int c = 0; c < chunks; ++c) {
    const int L = min(kC, a.T - c * kC);
    const float gc = *reinterpret_cast<const float*>(chunk(c) + kG);
    // 1. V' = U - W S.
    float acc[2][4] = {};
    tile_mma<kD / 8>(acc, Ws, kWS, mt, Ss, kVS, nb);
    each_acc(acc, mt, nb,
             [&](int r, int col, float& v) { Vp[r * kVS + col] = tf32(Us[r * kCols + col] - v); });
    __syncthreads();  // every read of Ws and Us is done
    if (c + 1 < chunks) load_wuk(c + 1);
    cp_async_commit();
    // 2. O = Q~ S + M V'.
    float o[2][4] = {};
    tile_mma<kD / 8>(o, Qs, kWS, mt, Ss, kVS, nb);
    tile_mma<kC / 8>(o, Ms, kMS, mt, Vp, kVS, nb);
    each_acc(o, mt, nb, [&](int r, int col, float& v) {
      if (r < L) a.o[(size_t(c * kC + r) * Hv + n) * kD + c0 + col] = v;
    });
    __syncthreads();  // every read of Qs and Ms is done
    if (c + 1 < chunks) load_qm(c + 1);
    cp_async_commit();
    // 3. S = Gamma_C S + K~^T V' (A = K~^T, stored as K~).
    each_acc(st, 16 * w, 0, [&](int, int, float& v) { v *= gc; });
    tile_mma<kC / 8, 4, true>(st, reinterpret_cast<const __half*>(Kb(c)), kWS, 16 * w, Vp, kVS, 0);
    __syncthreads();  // every read of Ss and Vp is done
    each_acc(st, 16 * w, 0, [&](int r, int col, float& v) { Ss[r * kVS + col] = tf32(v); });
    cp_async_wait<0>();
    __syncthreads();
  }
  each_acc(st, 16 * w, 0, [&](int r, int col, float& v) { Sg[size_t(r) * kD + col] = v; });
}

}  // namespace

size_t delta_scratch_floats(int T, int v_heads) {
  return size_t((T + kC - 1) / kC) * size_t(v_heads) * kPer / sizeof(float);
}

cudaError_t gdn_delta_chunked(const DeltaArgs& a, cudaStream_t st) {
  if (a.k_heads <= 0 || a.v_heads % a.k_heads != 0 || a.scratch == nullptr)
    return cudaErrorInvalidValue;
  if (a.T <= 0) return cudaSuccess;
  const int chunks = (a.T + kC - 1) / kC;
  constexpr size_t prep_smem = sizeof(PrepSmem);
  static_assert(kC * kAS <= kC * kKS, "A fits where q was");
  if (cudaError_t e = cudaFuncSetAttribute(
          chunk_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(prep_smem));
      e != cudaSuccess)
    return e;
  chunk_prep_kernel<<<dim3(chunks, a.v_heads), kPrepThreads, prep_smem, st>>>(a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  constexpr size_t state_smem = kSmTotal;
  if (cudaError_t e = cudaFuncSetAttribute(
          chunk_state_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(state_smem));
      e != cudaSuccess)
    return e;
  chunk_state_kernel<<<a.v_heads*(kD / kCols), kStateThreads, state_smem, st>>>(a);
  return cudaGetLastError();
}

}  // namespace tern::cuda
