// Gated DeltaNet decode step (T = 1), after the conv that the in-projection GEMV
// fused: q/k L2 norms (q also / sqrt(128)), beta and the decay, the delta rule on
// the fp32 state and the gated RMSNorm. The state columns are independent until
// the norm, so each value head is split over 4 blocks: block (head, c) owns
// columns c*32 .. c*32+31, copied into shared memory before the PDL wait (only
// this kernel writes S, once per step graph), and thread (lane, warp) sums rows
// warp*32 .. warp*32+31 of column c*32+lane. Both dot products come from the old
// column in one pass (o = a*S^T q + (k.q) u); the head's last block applies the
// gated norm. 128 threads of at most 32 registers: a block fits on an SM beside a
// tile-GEMV block (120 registers a thread), so this kernel starts during the
// in-projection and the out-projection's blocks start, and fetch their
// weights, during this one.
#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace tern::cuda {

namespace {

constexpr int kD = kGdnDim, kThreads = kD, kSplit = 4, kCols = kD / kSplit,
              kGroups = kThreads / kCols, kRows = kD / kGroups;

__device__ __forceinline__ void cp_async16(void* smem, const void* global) {
  asm volatile(
      "cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(uint32_t(__cvta_generic_to_shared(smem))),
      "l"(global)
      : "memory");
}

__global__ void __launch_bounds__(kThreads, 16) gdn_step_kernel(GdnStepArgs a) {
  pdl_launch_dependents();
  __shared__ __align__(16) float s[kD][kCols];
  __shared__ float q[kD], k[kD], red[3][kThreads / 32], pk[kGroups][kCols], pq[kGroups][kCols];
  const int n = blockIdx.x / kSplit, t = threadIdx.x, lane = t % kCols, grp = t / kCols;
  const int j = blockIdx.x % kSplit * kCols + lane, r0 = grp * kRows;
  float* S = a.S + size_t(n) * kD * kD + (j - lane);  // row r of this block's columns at r * kD
  for (int i = t; i < kD * kCols / 4; i += kThreads) {
    const int r = i / (kCols / 4), c = i % (kCols / 4) * 4;
    cp_async16(&s[r][c], S + r * kD + c);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  const float a_log = a.a_log[n], dt_bias = a.dt_bias[n];
  pdl_wait();

  const int m = n / (a.v_heads / a.k_heads), key_dim = a.k_heads * kD;
  q[t] = a.conv[m * kD + t];
  k[t] = a.conv[key_dim + m * kD + t];
  // |q|^2, |k|^2 and q.k in one block reduction: the L2 norms scale the dot
  // products instead of q and k themselves.
  float qq = warp_sum(q[t] * q[t]), kk = warp_sum(k[t] * k[t]), qk = warp_sum(q[t] * k[t]);
  if (t % 32 == 0) red[0][t / 32] = qq, red[1][t / 32] = kk, red[2][t / 32] = qk;
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  qq = kk = qk = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) qq += red[0][w], kk += red[1][w], qk += red[2][w];
  const float inv_q = rsqrtf(float(kD)) / sqrtf(qq + 1e-6f), inv_k = 1.0f / sqrtf(kk + 1e-6f);
  const float kq = qk * inv_q * inv_k;
  const float beta = sigmoidf(a.beta_in[n]);
  const float x = a.a_in[n] + dt_bias;
  const float alpha = expf(-expf(a_log) * (x > 20.0f ? x : log1pf(expf(x))));

  float sk = 0.0f, sq = 0.0f;
#pragma unroll 8
  for (int i = 0; i < kRows; ++i) {
    sk += s[r0 + i][lane] * k[r0 + i];
    sq += s[r0 + i][lane] * q[r0 + i];
  }
  pk[grp][lane] = sk * inv_k;
  pq[grp][lane] = sq * inv_q;
  __syncthreads();
  sk = sq = 0.0f;
#pragma unroll
  for (int r = 0; r < kGroups; ++r) {
    sk += pk[r][lane];
    sq += pq[r][lane];
  }
  const float u = beta * (a.conv[2 * key_dim + n * kD + j] - alpha * sk);
#pragma unroll 8
  for (int i = 0; i < kRows; ++i)
    S[size_t(r0 + i) * kD + lane] = alpha * s[r0 + i][lane] + k[r0 + i] * inv_k * u;
  float* y = a.y + n * kD;
  if (grp == 0) y[j] = alpha * sq + kq * u;

  // Gated RMSNorm over the head's 128 raw outputs, by the head's last block.
  if (!last_block(a.counters + n, kSplit)) return;
  const float o = __ldcg(y + t);
  const float ss = block_sum(o * o, red[0]);
  const float inv = 1.0f / sqrtf(ss / float(kD) + a.eps);
  y[t] = o * inv * a.norm[t] * siluf(a.z[n * kD + t]);
}

}  // namespace

cudaError_t gdn_step(const GdnStepArgs& a, cudaStream_t st) {
  return launch_pdl(gdn_step_kernel, dim3(a.v_heads * kSplit), dim3(kThreads), 0, st, a);
}

}  // namespace tern::cuda
