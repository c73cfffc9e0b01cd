// Gated DeltaNet decode step (T = 1), one block per value head, after the
// conv that the in-projection GEMV fused: q/k L2 norms (q also / sqrt(128)),
// beta and the decay, the delta rule on the fp32 state and the gated RMSNorm.
// Thread (j, quarter) keeps 32 rows of state column j in registers; both dot
// products come from the old column in one pass (o = a*S^T q + (k.q) u).
#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace tern::cuda {

namespace {

constexpr int kD = kGdnDim, kQuarters = 4, kRows = kD / kQuarters, kThreads = kD * kQuarters;

__global__ void __launch_bounds__(kThreads) gdn_step_kernel(GdnStepArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float q[kD], k[kD], v[kD], red[32], pk[kQuarters][kD], pq[kQuarters][kD];
  const int n = blockIdx.x, m = n / (a.v_heads / a.k_heads), t = threadIdx.x;
  const int key_dim = a.k_heads * kD;
  if (t < kD)
    q[t] = a.conv[m * kD + t];
  else if (t < 2 * kD)
    k[t - kD] = a.conv[key_dim + m * kD + t - kD];
  else if (t < 3 * kD)
    v[t - 2 * kD] = a.conv[2 * key_dim + n * kD + t - 2 * kD];
  __syncthreads();
  const float ssq = block_sum(t < kD ? q[t] * q[t] : 0.0f, red);
  const float ssk = block_sum(t < kD ? k[t] * k[t] : 0.0f, red);
  if (t < kD) {
    q[t] *= rsqrtf(float(kD)) / sqrtf(ssq + 1e-6f);
    k[t] *= 1.0f / sqrtf(ssk + 1e-6f);
  }
  __syncthreads();
  const float kq = block_sum(t < kD ? q[t] * k[t] : 0.0f, red);
  const float beta = sigmoidf(a.beta_in[n]);
  const float x = a.a_in[n] + a.dt_bias[n];
  const float g = -expf(a.a_log[n]) * (x > 20.0f ? x : log1pf(expf(x)));
  const float alpha = expf(g);

  const int j = t % kD, qr = t / kD;
  float* S = a.S + size_t(n) * kD * kD + size_t(qr * kRows) * kD + j;
  float s[kRows];
  float sk = 0.0f, sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kRows; ++i) s[i] = S[size_t(i) * kD];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    sk += s[i] * k[qr * kRows + i];
    sq += s[i] * q[qr * kRows + i];
  }
  pk[qr][j] = sk;
  pq[qr][j] = sq;
  __syncthreads();
  sk = pk[0][j] + pk[1][j] + pk[2][j] + pk[3][j];
  sq = pq[0][j] + pq[1][j] + pq[2][j] + pq[3][j];
  const float u = beta * (v[j] - alpha * sk);
  const float o = alpha * sq + kq * u;
#pragma unroll
  for (int i = 0; i < kRows; ++i) S[size_t(i) * kD] = alpha * s[i] + k[qr * kRows + i] * u;
  // Gated RMSNorm over the head's 128 outputs.
  const float ss = block_sum(qr == 0 ? o * o : 0.0f, red);
  if (qr == 0) {
    const float inv = 1.0f / sqrtf(ss / float(kD) + a.eps);
    a.y[n * kD + j] = o * inv * a.norm[j] * siluf(a.z[n * kD + j]);
  }
}

}  // namespace

cudaError_t gdn_step(const GdnStepArgs& a, cudaStream_t st) {
  return launch_pdl(gdn_step_kernel, dim3(a.v_heads), dim3(kThreads), 0, st, a);
}

}  // namespace tern::cuda
