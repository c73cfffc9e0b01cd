// Gated DeltaNet prefill, the token-parallel part and the sequential scan
// (the chunked tensor-core form is gdn_chunk_prep.cu and gdn_chunk_state.cu).
//
// gdn_prep: 16 tokens a block: the causal conv over the C = 2 Hk 128 + Hv 128
// qkv channels (the first kernel - 1 rows from the carried state), SiLU, the
// q/k L2 norms (16 threads a 128-wide head, 8 channels a thread), beta and the
// log-decay, written as q, k [T][Hk][128], v [T][Hv][128], beta, g [T][Hv].
// gdn_conv_state then moves the state past the chunk.
//
// gdn_delta_scan: the recurrence token by token (docs/model.md §DeltaNet). Block (value
// head n, 16 columns): thread (column c, row group rg) keeps S[16 rg ..
// 16 rg + 15][c] in registers for the whole call; per token the two dot
// products with k and q and k.q come from the old state in one pass (o =
// alpha S^T q + (k.q) u, the updated state's read), reduced over the 8 row
// groups by shuffles. Tokens come through shared memory 32 at a time,
// double-buffered by cp.async.
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/gdn_prefill.h"
#include "backends/cuda/host_state.h"
#include "backends/cuda/layout.h"

namespace tern::cuda {

namespace {

constexpr int kD = kGdnDim;

__device__ __forceinline__ float silu_exact(float x) {
  return x / (1.0f + expf(-x));
}

// gdn_prep: block (tokens tpb tb .. tpb tb + tpb - 1, channel units 256 ub ..):
// thread u keeps its 8 channels' conv weights and the last kernel - 1 input
// rows in registers and walks the block's tokens (the weights were read once
// a token before: 8 KB of L2 traffic a token and unit block). tpb is 16, or
// fewer where a short chunk would leave SMs idle (8 blocks at 32 tokens).
constexpr int kPrepThreads = 256, kPrepTokens = 16, kMaxKernel = 4;

__global__ void __launch_bounds__(kPrepThreads) prep_kernel(GdnPrepArgs a, int tpb) {
  const int Hk = a.k_heads, Hv = a.v_heads, tid = int(threadIdx.x);
  const int C = 2 * Hk * kD + Hv * kD, nu = C / 8, qk_units = Hk * kD / 8;
  const int u = int(blockIdx.y) * kPrepThreads + tid, H = a.kernel - 1;
  const int t0 = int(blockIdx.x) * tpb, t1 = min(a.T, t0 + tpb);
  const bool on = u < nu;
  float w[8][kMaxKernel] = {}, win[kMaxKernel][8] = {};  // win[j]: input row t - H + j
  if (on) {
    // 16-byte loads: at short chunks a block has few tokens, and the scalar
    // loads of its weights (each warp's 32 lines, 32 times) took most of its
    // time (ncu at 256 tokens: L1 69% busy, 31 us).
    if (a.kernel == kMaxKernel) {
      const float4* src = reinterpret_cast<const float4*>(a.conv_w) + 2 * u * kMaxKernel;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float4 v = src[i];
        w[i][0] = v.x, w[i][1] = v.y, w[i][2] = v.z, w[i][3] = v.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < kMaxKernel; ++j)
          if (j < a.kernel) w[i][j] = a.conv_w[size_t(8 * u + i) * a.kernel + j];
    }
#pragma unroll
    for (int j = 0; j < kMaxKernel - 1; ++j) {
      if (j >= H) continue;
      const int r = t0 - H + j;
      const float* src = r >= 0 ? a.proj + size_t(r) * a.ld : a.conv_state + size_t(H + r) * C;
      const float4 p0 = reinterpret_cast<const float4*>(src + 8 * u)[0];
      const float4 p1 = reinterpret_cast<const float4*>(src + 8 * u)[1];
      win[j][0] = p0.x, win[j][1] = p0.y, win[j][2] = p0.z, win[j][3] = p0.w;
      win[j][4] = p1.x, win[j][5] = p1.y, win[j][6] = p1.z, win[j][7] = p1.w;
    }
  }
  const bool is_q = u < qk_units, is_k = !is_q && u < 2 * qk_units;
  // Four tokens' inputs loaded at once, then used in turn (one token's loads
  // at a time left the block waiting on each).
  constexpr int kAhead = 4;
  for (int tb = t0; tb < t1; tb += kAhead) {
    float4 in[kAhead][2];
#pragma unroll
    for (int k = 0; k < kAhead; ++k)
      if (on && tb + k < t1) {
        const float4* row = reinterpret_cast<const float4*>(a.proj + size_t(tb + k) * a.ld + 8 * u);
        in[k][0] = row[0], in[k][1] = row[1];
      }
#pragma unroll
    for (int k = 0; k < kAhead; ++k) {
      const int t = tb + k;
      if (t >= t1) break;
      float y[8] = {};
      if (on) {
        const float4 p0 = in[k][0], p1 = in[k][1];
        const float cur[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          float acc = 0.0f;
#pragma unroll
          for (int j = 0; j < kMaxKernel; ++j)
            if (j < a.kernel) acc += w[i][j] * (j == H ? cur[i] : win[j][i]);
          y[i] = silu_exact(acc);
        }
#pragma unroll
        for (int j = 0; j + 1 < kMaxKernel; ++j)  // the window moves a row
#pragma unroll
          for (int i = 0; i < 8; ++i)
            if (j < H) win[j][i] = j + 1 == H ? cur[i] : win[j + 1][i];
      }
      // q and k heads: L2 norm over the head's 16 units (neighbouring threads).
      float ss = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) ss += y[i] * y[i];
#pragma unroll
      for (int o = 1; o < 16; o <<= 1) ss += __shfl_xor_sync(kFull, ss, o);
      if (!on) continue;
      float* dst;
      if (is_q || is_k) {
        const float inv = (is_q ? rsqrtf(float(kD)) : 1.0f) / sqrtf(ss + 1e-6f);
#pragma unroll
        for (int i = 0; i < 8; ++i) y[i] *= inv;
        dst = (is_q ? a.q : a.k) + size_t(t) * Hk * kD + 8 * (is_q ? u : u - qk_units);
      } else {
        dst = a.v + size_t(t) * Hv * kD + 8 * (u - 2 * qk_units);
      }
      reinterpret_cast<float4*>(dst)[0] = make_float4(y[0], y[1], y[2], y[3]);
      reinterpret_cast<float4*>(dst)[1] = make_float4(y[4], y[5], y[6], y[7]);
    }
  }
  if (blockIdx.y == 0)
    for (int i = tid; i < (t1 - t0) * Hv; i += kPrepThreads) {
      const int t = t0 + i / Hv, n = i % Hv;
      const float* row = a.proj + size_t(t) * a.ld + C + Hv * kD;
      const float b = row[n], x = row[Hv + n] + a.dt_bias[n];
      a.beta[size_t(t) * Hv + n] = 1.0f / (1.0f + expf(-b));
      a.g[size_t(t) * Hv + n] = -expf(a.a_log[n]) * (x > 20.0f ? x : log1pf(expf(x)));
    }
}

__global__ void conv_state_kernel(const float* proj, int T, int ld, int C, int kernel,
                                  float* state) {
  const int c = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= C) return;
  const int H = kernel - 1;
  for (int j = 0; j < H; ++j) {  // ascending: state row j + T is read before it is written
    const int r = T - H + j;
    state[size_t(j) * C + c] = r >= 0 ? proj[size_t(r) * ld + c] : state[size_t(j + T) * C + c];
  }
}

constexpr int kCols = 16, kGroups = 8, kRows = kD / kGroups, kScanThreads = kCols * kGroups;
constexpr int kTB = 32;                       // tokens a stage
constexpr int kPadRow = kD + kD / kRows * 4;  // 4 floats after every 16 rows: 160
struct ScanStage {
  float k[kTB][kPadRow], q[kTB][kPadRow], v[kTB][kCols], beta[kTB], alpha[kTB];
};

// Tokens [t0, t0 + n) into a stage (cp.async for q, k, v; beta and the decay
// by plain loads).
__device__ __forceinline__ void scan_load(const DeltaArgs& a, ScanStage& s, int n_head, int m,
                                          int c0, int t0, int n) {
  const int tid = int(threadIdx.x), Hk = a.k_heads, Hv = a.v_heads;
  for (int i = tid; i < 2 * kTB * (kD / 4); i += kScanThreads) {
    const int which = i / (kTB * (kD / 4)), r = i % (kTB * (kD / 4)), tok = r / (kD / 4),
              p = r % (kD / 4);
    if (tok >= n) continue;
    const float* src = (which == 0 ? a.k : a.q) + (size_t(t0 + tok) * Hk + m) * kD + 4 * p;
    float* dst = (which == 0 ? s.k[tok] : s.q[tok]) + 4 * p + 4 * (p / 4);
    cp_async16(dst, src);
  }
  for (int i = tid; i < kTB * (kCols / 4); i += kScanThreads) {
    const int tok = i / (kCols / 4), p = i % (kCols / 4);
    if (tok < n)
      cp_async16(s.v[tok] + 4 * p, a.v + (size_t(t0 + tok) * Hv + n_head) * kD + c0 + 4 * p);
  }
  if (tid < n) {
    s.beta[tid] = a.beta[size_t(t0 + tid) * Hv + n_head];
    s.alpha[tid] = expf(a.g[size_t(t0 + tid) * Hv + n_head]);
  }
}

__global__ void __launch_bounds__(kScanThreads) scan_kernel(DeltaArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  ScanStage* st = reinterpret_cast<ScanStage*>(smem);
  const int n = int(blockIdx.x) / (kD / kCols), c0 = int(blockIdx.x) % (kD / kCols) * kCols;
  const int m = n / (a.v_heads / a.k_heads);
  const int tid = int(threadIdx.x), c = tid / kGroups, rg = tid % kGroups, j = c0 + c;
  float* S = a.S + (size_t(n) * kD + rg * kRows) * kD + j;
  float s[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) s[i] = S[size_t(i) * kD];
  const int blocks = (a.T + kTB - 1) / kTB;
  scan_load(a, st[0], n, m, c0, 0, min(kTB, a.T));
  cp_async_commit();
  for (int bi = 0; bi < blocks; ++bi) {
    const int t0 = bi * kTB, nt = min(kTB, a.T - t0);
    if (bi + 1 < blocks)
      scan_load(a, st[(bi + 1) & 1], n, m, c0, t0 + kTB, min(kTB, a.T - t0 - kTB));
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const ScanStage& cur = st[bi & 1];
    for (int tok = 0; tok < nt; ++tok) {
      const float4* k4 = reinterpret_cast<const float4*>(cur.k[tok] + rg * (kRows + 4));
      const float4* q4 = reinterpret_cast<const float4*>(cur.q[tok] + rg * (kRows + 4));
      float kk[kRows], sk = 0.0f, sq = 0.0f, kq = 0.0f;
#pragma unroll
      for (int p = 0; p < kRows / 4; ++p) {
        const float4 kv = k4[p], qv = q4[p];
        kk[4 * p] = kv.x, kk[4 * p + 1] = kv.y, kk[4 * p + 2] = kv.z, kk[4 * p + 3] = kv.w;
        sk = fmaf(s[4 * p], kv.x, sk), sq = fmaf(s[4 * p], qv.x, sq), kq = fmaf(kv.x, qv.x, kq);
        sk = fmaf(s[4 * p + 1], kv.y, sk), sq = fmaf(s[4 * p + 1], qv.y, sq),
        kq = fmaf(kv.y, qv.y, kq);
        sk = fmaf(s[4 * p + 2], kv.z, sk), sq = fmaf(s[4 * p + 2], qv.z, sq),
        kq = fmaf(kv.z, qv.z, kq);
        sk = fmaf(s[4 * p + 3], kv.w, sk), sq = fmaf(s[4 * p + 3], qv.w, sq),
        kq = fmaf(kv.w, qv.w, kq);
      }
#pragma unroll
      for (int o = 1; o < kGroups; o <<= 1) {
        sk += __shfl_xor_sync(kFull, sk, o);
        sq += __shfl_xor_sync(kFull, sq, o);
        kq += __shfl_xor_sync(kFull, kq, o);
      }
      const float alpha = cur.alpha[tok], u = cur.beta[tok] * (cur.v[tok][c] - alpha * sk);
#pragma unroll
      for (int i = 0; i < kRows; ++i) s[i] = fmaf(alpha, s[i], kk[i] * u);
      if (rg == 0) a.o[(size_t(t0 + tok) * a.v_heads + n) * kD + j] = alpha * sq + kq * u;
    }
    __syncthreads();  // the stage is refilled next
  }
  cp_async_wait<0>();
#pragma unroll
  for (int i = 0; i < kRows; ++i) S[size_t(i) * kD] = s[i];
}

}  // namespace

cudaError_t gdn_prep(const GdnPrepArgs& a, cudaStream_t st) {
  const int C = 2 * a.k_heads * kD + a.v_heads * kD;
  // Rows are read 16 bytes at a time: ld a multiple of 4 floats.
  if (C % (8 * 16) != 0 || a.ld % 4 != 0 || a.kernel < 1 || a.kernel > kMaxKernel)
    return cudaErrorInvalidValue;
  if (a.T <= 0) return cudaSuccess;
  const int units = (C / 8 + kPrepThreads - 1) / kPrepThreads;
  const int tpb = std::clamp(a.T * units / (2 * sm_count()), 1, kPrepTokens);
  const dim3 grid((a.T + tpb - 1) / tpb, units);
  prep_kernel<<<grid, kPrepThreads, 0, st>>>(a, tpb);
  return cudaGetLastError();
}

cudaError_t gdn_conv_state(const float* proj, int T, int ld, int channels, int kernel,
                           float* conv_state, cudaStream_t st) {
  if (T <= 0 || kernel <= 1) return cudaSuccess;
  conv_state_kernel<<<(channels + 255) / 256, 256, 0, st>>>(proj, T, ld, channels, kernel,
                                                            conv_state);
  return cudaGetLastError();
}

cudaError_t gdn_delta_scan(const DeltaArgs& a, cudaStream_t st) {
  if (a.k_heads <= 0 || a.v_heads % a.k_heads != 0) return cudaErrorInvalidValue;
  if (a.T <= 0) return cudaSuccess;
  constexpr size_t smem = 2 * sizeof(ScanStage);
  if (cudaError_t e =
          cudaFuncSetAttribute(scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      e != cudaSuccess)
    return e;
  scan_kernel<<<a.v_heads*(kD / kCols), kScanThreads, smem, st>>>(a);
  return cudaGetLastError();
}

}  // namespace tern::cuda
