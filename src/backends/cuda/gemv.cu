// Batch-1 GEMV over an affine 4/8-bit matrix, with an optional RMSNorm of the
// input in the prologue (every block recomputes it: 2K floats from L2 are
// cheaper than a kernel) and three epilogues: store, residual add, and the
// GDN causal conv + SiLU + conv-state update (rows < channels).
#include <algorithm>

#include "backends/cuda/qdot.cuh"

namespace tern::cuda {

namespace {

constexpr int kThreads = 256;

template <int BITS, int U>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvArgs a) {
  using C = Chunk<BITS>;
  extern __shared__ float4 sm4[];
  pdl_launch_dependents();
  const int K = a.W.cols, NC = K / C::kCodes;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int lpr = lanes_per_row(NC), rpw = 32 / lpr, sub = lane / lpr, sl = lane % lpr;
  const int nwarps = gridDim.x * (kThreads / 32);
  // The weights do not depend on the previous kernel: start their first rows
  // towards L2 before waiting for it.
  for (int k = 0, r = (blockIdx.x * (kThreads / 32) + warp) * rpw + sub; k < 2 && r < a.W.rows;
       ++k, r += nwarps * rpw)
    prefetch_row<BITS>(a.W, size_t(r), sl, lpr);
  pdl_wait();
  const StagedX xs = stage_x<BITS>(a.x, K, a.norm, a.eps, reinterpret_cast<float*>(sm4));
  for (int r0 = (blockIdx.x * (kThreads / 32) + warp) * rpw; r0 < a.W.rows; r0 += nwarps * rpw) {
    const int r = r0 + sub;
    float acc = r < a.W.rows ? row_dot<BITS, U>(a.W, size_t(r), xs, sl, lpr) : 0.0f;
    acc = group_sum(acc, lpr);
    if (sl != 0 || r >= a.W.rows) continue;
    if (a.out == GemvOut::add) {
      a.y[r] += acc;
      continue;
    }
    a.y[r] = acc;
    if (a.out == GemvOut::conv && r < a.conv.channels) {
      const ConvArgs& cv = a.conv;
      const int Kc = cv.kernel, Ch = cv.channels;
      const float* w = cv.weight + size_t(r) * Kc;
      float s = w[Kc - 1] * acc;
      for (int j = 0; j < Kc - 1; ++j) s += w[j] * cv.state[size_t(j) * Ch + r];
      cv.out[r] = siluf(s);
      for (int j = 0; j + 1 < Kc - 1; ++j)
        cv.state[size_t(j) * Ch + r] = cv.state[size_t(j + 1) * Ch + r];
      cv.state[size_t(Kc - 2) * Ch + r] = acc;
    }
  }
}

template <int BITS>
cudaError_t launch(const GemvArgs& a, cudaStream_t st) {
  const int NC = a.W.cols / Chunk<BITS>::kCodes;
  int lpr = 1;
  while (lpr < 32 && 2 * lpr <= NC) lpr *= 2;
  const int rows_per_block = (kThreads / 32) * (32 / lpr);
  const int blocks = std::min((a.W.rows + rows_per_block - 1) / rows_per_block, 132 * 4);
  // Chunks in flight per lane: the chunks each lane owns, at most 4.
  const int per_lane = NC / lpr;
  auto kernel = per_lane >= 4   ? gemv_kernel<BITS, 4>
                : per_lane == 2 ? gemv_kernel<BITS, 2>
                                : gemv_kernel<BITS, 1>;
  return launch_pdl(kernel, dim3(blocks), dim3(kThreads), stage_bytes<BITS>(a.W.cols), st, a);
}

}  // namespace

cudaError_t gemv(const GemvArgs& a, cudaStream_t st) {
  if (a.W.bits == 4) return launch<4>(a, st);
  if (a.W.bits == 8) return launch<8>(a, st);
  return cudaErrorInvalidValue;
}

}  // namespace tern::cuda
