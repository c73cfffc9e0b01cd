// The tensor-core GEMV kernel shared by the dense projections and the MoE
// experts (tile_mma.cuh has the per-round arithmetic). One block per SM owns a
// contiguous range of 16-row tiles and walks it in batches of TB tiles, its 16
// warps splitting the rounds (128 columns each, RPW per warp). Two batches'
// weights are loaded into registers up front (before waiting for the previous
// kernel when the job's rows do not depend on it), and each batch's
// successor-but-one goes out as soon as the batch's registers are consumed.
//
// A Job says which rows a (tile, round) reads and what becomes of the sums:
//   static constexpr bool kEarly;  // rows known before the previous kernel ends
//   static constexpr bool kRoutes; // picks its rows itself after the PDL
//                                  // wait: route(fetch()), then dependents
//                                  // launch and loads go out; settle(staged)
//                                  // after staging
//   static constexpr int kAlign;   // blocks start at multiples of this many tiles
//   int tiles() const; int rounds() const; int cols() const;  // host and device;
//                                      cols: the staged activation's length
//   size_t extra_floats(int blocks) const;  // shared memory of its own, ahead
//                                  // of staging
//   void before_wait(float* extra, int t0, int t1) const;  // cp.async copies
//                                  // that need no earlier kernel (block's tiles)
//   tile::Load load(int tile, int round) const;
//   tile::Staged stage(float* smem, float** red) const;  // smem: after the extra;
//                                  // waits for before_wait's copies
//   void finish(int b0, int t0, int t1, const tile::Sums& s) const;  // all threads
#pragma once

#include <algorithm>

#include "backends/cuda/tile_mma.cuh"
#include "backends/cuda/trace.cuh"

namespace tern::cuda::tile {

// A batch's per-warp partial sums in shared memory: warp w's row i of the
// batch at p[w * stride + i]; the first `warps` warps hold rounds. A row's
// total is multiplied by the staged activation's scale.
struct Sums {
  const float* p;
  int stride, warps;
  float scale;
  __device__ float row(int i) const {
    float s = 0.0f;
    for (int w = 0; w < warps; ++w) s += p[w * stride + i];
    return s * scale;
  }
};

template <int RPW, int TB, typename Job>
__global__ void __launch_bounds__(kThreads, 1) gemv_kernel(Job job) {
  extern __shared__ float4 sm4[];
  TERN_TRACE_BEGIN(Job::kEarly    ? TraceKind::gemv_early
                   : Job::kRoutes ? TraceKind::gemv_routed
                                  : TraceKind::gemv_late);
  if constexpr (!Job::kRoutes) pdl_launch_dependents();
  const int tiles = job.tiles(), rounds = job.rounds();
  const int units = tiles / Job::kAlign;
  const int t0 = int(blockIdx.x * unsigned(units) / gridDim.x) * Job::kAlign;
  const int t1 = int((blockIdx.x + 1) * unsigned(units) / gridDim.x) * Job::kAlign;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
  using Batch = Load[TB][RPW];
  auto issue = [&](Batch& ld, int b0) {
#pragma unroll
    for (int tt = 0; tt < TB; ++tt)
#pragma unroll
      for (int j = 0; j < RPW; ++j)
        if (warp * RPW + j < rounds && b0 + tt < t1) ld[tt][j] = job.load(b0 + tt, warp * RPW + j);
  };
  Batch ld0, ld1;
  auto start = [&] { issue(ld0, t0), issue(ld1, t0 + TB); };
  float* const sm = reinterpret_cast<float*>(sm4);
  if constexpr (Job::kEarly) start();
  TERN_TRACE_MARK(issued);
  job.before_wait(sm, t0, t1);
  pdl_wait();
  TERN_TRACE_MARK(waited);
  if constexpr (!Job::kEarly && !Job::kRoutes) start();
  if constexpr (Job::kRoutes) {
    job.route(job.fetch());
    pdl_launch_dependents();
    start();
  }
  if constexpr (!Job::kEarly) TERN_TRACE_MARK(issued);
  float* red = nullptr;
  const Staged xs = job.stage(sm + job.extra_floats(int(gridDim.x)), &red);
  if constexpr (Job::kRoutes) job.settle(xs);
  TERN_TRACE_MARK(staged);
  const Sums sums{nullptr, TB * 16, min(kWarps, (rounds + RPW - 1) / RPW), xs.norm};
  // Computes the batch at b0 from ld, refills ld with the batch at b0 + 2 TB,
  // and reduces across warps through red half `half`.
  auto step = [&](Batch& ld, int b0, int half) {
    float acc[TB][2] = {};
#pragma unroll
    for (int j = 0; j < RPW; ++j)
      if (warp * RPW + j < rounds) {
        const Fragment f = fragment(xs, 4 * (warp * RPW + j));
#pragma unroll
        for (int tt = 0; tt < TB; ++tt) round_dot(ld[tt][j], f, acc[tt][0], acc[tt][1]);
      }
    issue(ld, b0 + 2 * TB);
    float* rd = red + half * kWarps * TB * 16;
#pragma unroll
    for (int tt = 0; tt < TB; ++tt) {
      const float v0 = quad_sum(acc[tt][0]), v8 = quad_sum(acc[tt][1]);
      if ((lane & 3) == 0) {
        rd[warp * TB * 16 + tt * 16 + g] = v0;
        rd[warp * TB * 16 + tt * 16 + g + 8] = v8;
      }
    }
    __syncthreads();
    Sums s = sums;
    s.p = rd;
    job.finish(b0, t0, t1, s);
  };
  for (int b0 = t0; b0 < t1; b0 += 2 * TB) {
    step(ld0, b0, 0);
    if (b0 == t0) TERN_TRACE_MARK(first);
    if (b0 + TB < t1) step(ld1, b0 + TB, 1);
  }
  TERN_TRACE_END();
}

// One block per SM (fewer when there are fewer tile groups).
template <typename Job>
int blocks(const Job& job) {
  return std::max(1, std::min(job.tiles() / Job::kAlign, sm_count()));
}

template <int RPW, int TB, typename Job>
cudaError_t launch(const Job& job, cudaStream_t st) {
  if (job.rounds() > RPW * kWarps) return cudaErrorInvalidValue;
  const int blocks = tile::blocks(job);
  const size_t smem =
      stage_bytes(job.cols(), 2 * kWarps * TB * 16) + sizeof(float) * job.extra_floats(blocks);
  return launch_pdl(&gemv_kernel<RPW, TB, Job>, dim3(blocks), dim3(kThreads), smem, st, job);
}

}  // namespace tern::cuda::tile
