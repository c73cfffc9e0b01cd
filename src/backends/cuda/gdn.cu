// Gated DeltaNet decode step (T = 1), after the conv that the in-projection GEMV
// fused: q/k L2 norms (q also / sqrt(128)), beta and the decay, the delta rule on
// the fp32 state and the gated RMSNorm. The state columns are independent until
// the norm, so each value head is split over 4 blocks to fill the GPU: block
// (head, c) owns columns c*32 .. c*32+31 and thread (lane, warp) keeps rows
// warp*16 .. warp*16+15 of column c*32+lane in registers (a warp loads 128
// contiguous bytes a row). Both dot products come from the old column in one
// pass (o = a*S^T q + (k.q) u). The gated norm is the out_proj GEMV's staging.
#include "backends/cuda/common.cuh"
#include "backends/cuda/gdn.h"
#include "backends/cuda/rows.h"
#include "backends/cuda/trace.cuh"

namespace tern::cuda {

namespace {

constexpr int kD = kGdnDim, kThreads = 2 * kD, kSplit = 4, kCols = kD / kSplit,
              kGroups = kThreads / kCols, kRows = kD / kGroups;

// P: GdnStepArgs, or RowArgs of them (gdn_step_rows).
template <typename P>
__global__ void __launch_bounds__(kThreads) gdn_step_kernel(const __grid_constant__ P p) {
  const GdnStepArgs& a = args_of(p);
  TERN_TRACE_BEGIN(TraceKind::gdn_step);
  pdl_launch_dependents();
  const int n = blockIdx.x / kSplit, t = threadIdx.x, lane = t % kCols, grp = t / kCols;
  const int j = blockIdx.x % kSplit * kCols + lane, r0 = grp * kRows;
  // Only this kernel writes S (once per step graph) and the weights are
  // constant, so their loads overlap the previous kernel's tail.
  float* S = a.S + (size_t(n) * kD + r0) * kD + j;
  float s[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) s[i] = S[size_t(i) * kD];
  const float rate = -expf(a.a_log[n]), dt_bias = a.dt_bias[n];  // the decay's -exp(A_log)
  // The key head and the inputs' offsets need no earlier kernel either (two
  // integer divisions: the kernels are issue-bound).
  const int m = n / (a.v_heads / a.k_heads), key_dim = a.k_heads * kD;
  pdl_wait();
  TERN_TRACE_MARK(waited);

  __shared__ float q[kD], k[kD], red[3][kThreads / 32], pk[kGroups][kCols], pq[kGroups][kCols];
  // Every input of the step goes out at once (one round trip to L2).
  const float v = a.conv[2 * key_dim + n * kD + j], beta_in = a.beta_in[n], a_in = a.a_in[n];
  if (t < kD)
    q[t] = a.conv[m * kD + t];
  else
    k[t - kD] = a.conv[key_dim + m * kD + t - kD];
  __syncthreads();
  // |q|^2, |k|^2 and q.k in one block reduction: the L2 norms scale the dot
  // products instead of q and k themselves.
  float qq = t < kD ? q[t] * q[t] : 0.0f, kk = t < kD ? k[t] * k[t] : 0.0f,
        qk = t < kD ? q[t] * k[t] : 0.0f;
  qq = warp_sum(qq), kk = warp_sum(kk), qk = warp_sum(qk);
  if (t % 32 == 0) red[0][t / 32] = qq, red[1][t / 32] = kk, red[2][t / 32] = qk;
  __syncthreads();
  qq = kk = qk = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) qq += red[0][w], kk += red[1][w], qk += red[2][w];
  // rsqrtf (a few ulp) rather than IEEE square roots and divisions.
  const float inv_q = rsqrtf(float(kD)) * rsqrtf(qq + 1e-6f), inv_k = rsqrtf(kk + 1e-6f);
  const float kq = qk * inv_q * inv_k;
  const float beta = sigmoidf(beta_in);
  const float x = a_in + dt_bias;
  const float alpha = expf(rate * (x > 20.0f ? x : log1pf(expf(x))));

  float sk = 0.0f, sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    sk += s[i] * k[r0 + i];
    sq += s[i] * q[r0 + i];
  }
  sk *= inv_k;
  sq *= inv_q;
  pk[grp][lane] = sk;
  pq[grp][lane] = sq;
  __syncthreads();
  sk = sq = 0.0f;
#pragma unroll
  for (int r = 0; r < kGroups; ++r) {
    sk += pk[r][lane];
    sq += pq[r][lane];
  }
  const float u = beta * (v - alpha * sk);
#pragma unroll
  for (int i = 0; i < kRows; ++i) S[size_t(i) * kD] = alpha * s[i] + k[r0 + i] * inv_k * u;
  if (grp == 0) a.y[n * kD + j] = alpha * sq + kq * u;
  TERN_TRACE_END();
}

}  // namespace

TERN_TRACE_BINDER(gdn)

// Narrow (common.cuh): one block beside each in-projection block, spread over
// the SMs instead of packed onto the few with room.
cudaError_t gdn_step(const GdnStepArgs& a, cudaStream_t st) {
  return launch_pdl(gdn_step_kernel<GdnStepArgs>, dim3(a.v_heads * kSplit), dim3(kThreads),
                    kNarrowSmem, st, a);
}

cudaError_t gdn_step_rows(const GdnStepArgs* rows, int n, cudaStream_t st) {
  if (!rows_fit(n)) return cudaErrorInvalidValue;
  return launch_pdl(gdn_step_kernel<RowArgs<GdnStepArgs>>,
                    dim3(rows[0].v_heads * kSplit, 1, unsigned(n)), dim3(kThreads), kNarrowSmem, st,
                    row_args(rows, n));
}

}  // namespace tern::cuda
