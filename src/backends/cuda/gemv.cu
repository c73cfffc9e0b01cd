// Batch-1 GEMV over an affine 4/8-bit matrix, with an optional RMSNorm of the
// input in the prologue (every block recomputes it: 2K floats from L2 are
// cheaper than a kernel) and three epilogues: store, residual add, and the
// GDN causal conv + SiLU + conv-state update (rows < channels).
#include <algorithm>

#include "backends/cuda/qdot.cuh"
#include "backends/cuda/tile_mma.cuh"

namespace tern::cuda {

namespace {

constexpr int kThreads = 256;

// The epilogue for output row r.
__device__ __forceinline__ void finish_row(const GemvArgs& a, int r, float acc) {
  if (a.out == GemvOut::add) {
    a.y[r] += acc;
    return;
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

// Each warp takes N rows at a time (U chunks of each per lane in flight
// together), walking the matrix with a grid-wide stride.
template <int BITS, int U, int N>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvArgs a) {
  using C = Chunk<BITS>;
  extern __shared__ float4 sm4[];
  pdl_launch_dependents();
  const int K = a.W.cols, NC = K / C::kCodes, rows = a.W.rows;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int lpr = lanes_per_row(NC), rpw = 32 / lpr, sub = lane / lpr, sl = lane % lpr;
  const int first = (blockIdx.x * (kThreads / 32) + warp) * rpw * N + sub;
  const int stride = gridDim.x * (kThreads / 32) * rpw * N;
  // The weights do not depend on the previous kernel: start the first rows
  // towards L2 before waiting for it.
  for (int k = 0; k < N && first + k * rpw < rows; ++k)
    prefetch_row<BITS>(a.W, size_t(first + k * rpw), sl, lpr);
  pdl_wait();
  const StagedX xs = stage_x<BITS>(a.x, K, a.norm, a.eps, reinterpret_cast<float*>(sm4));
  for (int r0 = first; r0 - sub < rows; r0 += stride) {
    size_t r[N];
    int xoff[N], n = 0;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      r[k] = size_t(min(r0 + k * rpw, rows - 1));
      xoff[k] = 0;
      n += r0 + k * rpw < rows;
    }
    float acc[N] = {};
    rows_dot<BITS, N, U>(a.W, r, xoff, n, xs, sl, lpr, acc);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float sum = group_sum(acc[k], lpr);
      if (sl == 0 && r0 + k * rpw < rows) finish_row(a, r0 + k * rpw, sum);
    }
  }
}

// The tensor-core path (tile_mma.cuh) for 4-bit matrices. One block per SM
// owns a contiguous range of 16-row tiles and walks it in batches of TB tiles,
// its 16 warps splitting K (RPW rounds of 128 columns each). Two batches'
// weights are loaded into registers before waiting for the previous kernel,
// and each batch's successor-but-one goes out as soon as the batch's registers
// are consumed, so every SM keeps ~2 x 16 x TB x RPW KB in flight.
template <int RPW, int TB>
__global__ void __launch_bounds__(tile::kThreads, 1) gemv_tile_kernel(GemvArgs a) {
  extern __shared__ float4 sm4[];
  pdl_launch_dependents();
  const int K = a.W.cols, rounds = K / tile::kRound, rows = a.W.rows, tiles = (rows + 15) / 16;
  const int t0 = int(blockIdx.x * unsigned(tiles) / gridDim.x);
  const int t1 = int((blockIdx.x + 1) * unsigned(tiles) / gridDim.x);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
  using Batch = tile::Load[TB][RPW];
  auto issue = [&](Batch& ld, int b0) {
#pragma unroll
    for (int tt = 0; tt < TB; ++tt)
#pragma unroll
      for (int j = 0; j < RPW; ++j) {
        const int r = warp * RPW + j, row = (b0 + tt) * 16 + g;
        if (r < rounds && b0 + tt < t1)
          ld[tt][j] =
              tile::load(a.W, size_t(min(row, rows - 1)), size_t(min(row + 8, rows - 1)), r);
      }
  };
  Batch ld0, ld1;
  issue(ld0, t0);
  issue(ld1, t0 + TB);
  pdl_wait();
  float* red = nullptr;
  const tile::Staged xs =
      tile::stage(a.x, K, a.norm, a.eps, nullptr, 0, reinterpret_cast<float*>(sm4), &red);
  // Computes the batch at b0 from ld, refills ld with the batch at b0 + 2 TB,
  // and reduces across warps through red half `half`.
  auto step = [&](Batch& ld, int b0, int half) {
    float acc[TB][2] = {};
#pragma unroll
    for (int tt = 0; tt < TB; ++tt)
#pragma unroll
      for (int j = 0; j < RPW; ++j)
        if (warp * RPW + j < rounds)
          tile::round_dot(ld[tt][j], xs, 4 * (warp * RPW + j), acc[tt][0], acc[tt][1]);
    issue(ld, b0 + 2 * TB);
    float* rd = red + half * tile::kWarps * TB * 16;
#pragma unroll
    for (int tt = 0; tt < TB; ++tt) {
      const float v0 = tile::quad_sum(acc[tt][0]), v8 = tile::quad_sum(acc[tt][1]);
      if ((lane & 3) == 0) {
        rd[warp * TB * 16 + tt * 16 + g] = v0;
        rd[warp * TB * 16 + tt * 16 + g + 8] = v8;
      }
    }
    __syncthreads();
    const int row = b0 * 16 + int(threadIdx.x);
    if (threadIdx.x < TB * 16 && b0 + int(threadIdx.x) / 16 < t1 && row < rows) {
      float sum = 0.0f;
      for (int w = 0; w < tile::kWarps && w * RPW < rounds; ++w)
        sum += rd[w * TB * 16 + threadIdx.x];
      finish_row(a, row, sum);
    }
  };
  for (int b0 = t0; b0 < t1; b0 += 2 * TB) {
    step(ld0, b0, 0);
    if (b0 + TB < t1) step(ld1, b0 + TB, 1);
  }
}

template <int RPW, int TB>
cudaError_t launch_tile(const GemvArgs& a, cudaStream_t st) {
  static const int sms = [] {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n;
  }();
  const size_t smem = tile::stage_bytes(a.W.cols, 2 * tile::kWarps * TB * 16);
  const int tiles = (a.W.rows + 15) / 16;
  return launch_pdl(&gemv_tile_kernel<RPW, TB>, dim3(std::min(tiles, sms)), dim3(tile::kThreads),
                    smem, st, a);
}

template <int BITS>
cudaError_t launch(const GemvArgs& a, cudaStream_t st) {
  const int NC = a.W.cols / Chunk<BITS>::kCodes;
  int lpr = 1;
  while (lpr < 32 && 2 * lpr <= NC) lpr *= 2;
  // Chunks in flight per lane: the chunks each lane owns, at most 4; with
  // two or fewer, each warp takes two rows at a time.
  const int per_lane = NC / lpr, n = per_lane >= 4 ? 1 : 2;
  void (*kernel)(GemvArgs) = &gemv_kernel<BITS, 1, 2>;
  if (per_lane == 2) kernel = &gemv_kernel<BITS, 2, 2>;
  if (per_lane >= 4) kernel = &gemv_kernel<BITS, 4, 1>;
  const int rows_per_block = (kThreads / 32) * (32 / lpr) * n;
  const int blocks = std::min((a.W.rows + rows_per_block - 1) / rows_per_block, 132 * 4);
  return launch_pdl(kernel, dim3(blocks), dim3(kThreads), stage_bytes<BITS>(a.W.cols), st, a);
}

}  // namespace

cudaError_t gemv(const GemvArgs& a, cudaStream_t st) {
  const int rounds = a.W.cols / tile::kRound;
  if (a.W.bits == 4 && a.W.cols % tile::kRound == 0 && rounds <= 2 * tile::kWarps) {
    if (rounds <= tile::kWarps) return launch_tile<1, 3>(a, st);
    return launch_tile<2, 1>(a, st);
  }
  if (a.W.bits == 4) return launch<4>(a, st);
  if (a.W.bits == 8) return launch<8>(a, st);
  return cudaErrorInvalidValue;
}

}  // namespace tern::cuda
