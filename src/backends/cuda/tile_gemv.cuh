// The tensor-core GEMV kernel shared by the dense projections and the MoE
// experts (tile_mma.cuh has the per-round arithmetic). One block per SM owns a
// contiguous range of 16-row tiles and walks it in batches of TB tiles, its 16
// warps splitting the rounds (128 columns each, RPW per warp). The tiles (the
// tile layout, layout.h) come into a ring of shared-memory stages by bulk
// copies (the TMA engine; a lane a copy): the first kFirstCopies before
// waiting for the previous kernel when the job's rows do not depend on it, the
// rest after staging; each tile is dotted as it lands, and a stage is refilled
// as soon as its batch is consumed.
// A block takes at most 64 registers a thread and a shared-memory class
// (common.cuh), so the next kernel's block starts beside it and its copies go
// out while this one computes: DRAM stays busy across kernel boundaries
// (bench/probes/membench.cu: 10.6 MB in 2.45 us that way, 4.1-4.7 us without).
//
// A Job says which rows a tile holds and what becomes of the sums:
//   static constexpr bool kEarly;  // rows known before the previous kernel ends
//   static constexpr bool kRoutes; // picks its rows itself after the PDL
//                                  // wait: route(fetch()) in warp 0, whose
//                                  // copies go out before a block barrier and
//                                  // the dependents' launch; settle(norm)
//                                  // after the first batch's barrier
//   static constexpr int kAlign;   // blocks start at multiples of this many tiles
//   static constexpr bool kNarrow; // the narrow shared-memory class (common.cuh)
//   int tiles() const; int rounds() const; int cols() const;  // host and device;
//                                      cols: the staged activation's length
//   tile::TileImage image() const;  // host and device
//   size_t extra_floats(int blocks) const;  // shared memory of its own, at the
//                                  // start
//   void before_wait(float* extra, int t0, int t1, tile::Cols mine) const;
//                                  // cp.async copies that need no earlier
//                                  // kernel (block's tiles; mine: the warp's
//                                  // staged columns)
//   int pieces() const;            // host and device: bulk copies a tile
//   void copy(int tile, int piece, uint8_t* stage, uint64_t* bar) const;  // one
//                                  // thread: one piece of the tile's image
//   tile::Staged stage(float* smem, float** red, tile::Cols mine) const;
//                                  // the warp's columns; waits for the
//                                  // thread's own before_wait copies
//   L2Ahead ahead() const;         // a later GEMV's tiles brought into L2
//                                  // after the block's copies
//   Pre preload(int t0, int t1) const;  // what the epilogue reads from
//                                  // earlier kernels, loaded after staging
//                                  // (NoPreload when nothing)
//   void finish(int b0, int t0, int t1, const tile::Sums& s, const Pre&) const;
//                                  // all threads
#pragma once

#include <algorithm>
#include <type_traits>

#include "backends/cuda/gemv.h"
#include "backends/cuda/host_state.h"
#include "backends/cuda/rows.h"
#include "backends/cuda/tile_mma.cuh"
#include "backends/cuda/trace.cuh"

namespace tern::cuda::tile {

// A batch's per-warp partial sums in shared memory: warp w's row i of the
// batch at p[w * stride + i]; the first `warps` warps hold rounds. A row's
// total is multiplied by scale (the RMSNorm factor, Staged::norm).
struct Sums {
  const float* p;
  int stride, warps;
  float scale;
  __device__ float row(int i) const { return warps_sum(p, stride, warps, i) * scale; }
};

// Where block b of `blocks` starts in `units` split evenly (block b's share is
// [split_at(b), split_at(b + 1))).
__device__ __forceinline__ int split_at(int b, int units, int blocks) {
  return int(unsigned(b) * unsigned(units) / unsigned(blocks));
}

// This block's share of a.tiles into L2: the late tiles of the later
// kernel's blocks blockIdx.x, + gridDim.x, ... (one thread).
__device__ inline void l2_ahead(const L2Ahead& a) {
  for (int c = int(blockIdx.x); a.tiles != nullptr && c < a.blocks; c += int(gridDim.x)) {
    const int t0 = split_at(c, a.n, a.blocks) + a.skip, t1 = split_at(c + 1, a.n, a.blocks);
    if (t0 >= t1) continue;
    const uint8_t* p = a.tiles + size_t(t0) * a.tile_bytes;
    bulk_prefetch_l2(p, uint32_t(t1 - t0) * a.tile_bytes);
  }
}

// What a job's preload() returns when its epilogue needs nothing loaded early.
struct NoPreload {};

// One block per SM (fewer when there are fewer tile groups).
template <typename Job>
int blocks(const Job& job) {
  return std::max(1, std::min(job.tiles() / Job::kAlign, sm_count()));
}

// The most tiles a block takes.
template <typename Job>
int per_block(const Job& job) {
  const int b = blocks(job), units = job.tiles() / Job::kAlign;
  return (units + b - 1) / b * Job::kAlign;
}

// Shared memory of a block: the job's extra floats, the ring, its barriers,
// the staged activation and the reduction space; the ring takes what its class
// (common.cuh: wide unless Job::kNarrow) leaves, up to a stage a tile.
constexpr int kMaxStages = 16;
// Tiles a block copies at its first issue point (before the wait, or after
// routing); the rest go out after staging, so the staging's L2 reads do not
// queue behind them (2 of 0-6 measured best, +2.3% at 4K over all of them;
// per kernel kind 1-7 were within 0.3%).
// Down takes one tile a block.
template <typename Job>
constexpr int kFirstCopies = Job::kEarly ? 2 : kMaxStages;
constexpr size_t align128(size_t n) {
  return (n + 127) / 128 * 128;
}
template <int TB, typename Job>
struct Layout {
  size_t extra, ring, bars, stage, total;
  int stages;
  FastDiv pieces;  // the job's bulk copies a tile
  explicit Layout(const Job& job) : pieces(uint32_t(job.pieces())) {
    extra = align128(sizeof(float) * job.extra_floats(blocks(job)));
    const size_t fixed = extra + 8 * kMaxStages + stage_bytes(job.cols(), 2 * kWarps * TB * 16);
    const size_t cap = Job::kNarrow ? kMaxNarrowSmem : kWideSmem;
    const size_t fit = fixed < cap ? (cap - fixed) / job.image().bytes() : 0;
    stages = int(std::min<size_t>({fit, size_t(per_block(job)), size_t(kMaxStages)}));
    ring = extra;
    bars = ring + size_t(stages) * job.image().bytes();
    stage = bars + 8 * kMaxStages;
    total = std::max(fixed + size_t(stages) * job.image().bytes(),
                     Job::kNarrow ? kNarrowSmem : kWideSmem);
  }
};

// kOne: the block's tiles all come in one batch, a stage each (every
// per-layer GEMV), so stage and phase are the tile's index and 0 and nothing
// is refilled; the ring's bookkeeping is instructions, and the kernels are
// issue-bound (+2.5% at 4K, though ptxas spills 16 bytes in route_up's
// kernel).
template <int RPW, int TB, bool kOne, typename Job>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_kernel(const __grid_constant__ Job job, Layout<TB, Job> lay) {
  extern __shared__ float4 sm4[];
  TERN_TRACE_BEGIN(Job::kEarly    ? TraceKind::gemv_early
                   : Job::kRoutes ? TraceKind::gemv_routed
                                  : TraceKind::gemv_late);
  if constexpr (!Job::kRoutes) pdl_launch_dependents();
  const int tiles = job.tiles(), rounds = job.rounds(), S = lay.stages;
  const int units = tiles / Job::kAlign;
  const int blk = int(blockIdx.x), grid = int(gridDim.x);
  const int t0 = split_at(blk, units, grid) * Job::kAlign;
  const int t1 = split_at(blk + 1, units, grid) * Job::kAlign;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
  uint8_t* const base = reinterpret_cast<uint8_t*>(sm4);
  uint8_t* const ring = base + lay.ring;
  uint64_t* const bars = reinterpret_cast<uint64_t*>(base + lay.bars);
  const TileImage img = job.image();
  auto stage_at = [&](int slot) { return ring + size_t(slot) * img.bytes(); };
  // Piece p of tile t's copies into its stage; piece 0 arms the stage's
  // barrier. The first stages' pieces go out from the lanes of one warp
  // (kIssuer below).
  const int P = job.pieces();
  // Copy i of a run: its tile and piece (one piece a tile for most jobs).
  auto tile_of = [&](int i) { return P == 1 ? i : lay.pieces.div(i); };
  auto piece_of = [&](int i) { return P == 1 ? 0 : lay.pieces.mod(i); };
  auto issue = [&](int t, int p) {
    const int slot = kOne ? t - t0 : (t - t0) % S;  // kOne: a stage a tile
    if (p == 0) mbar_arrive_expect(bars + slot, img.bytes());
    job.copy(t, p, stage_at(slot), bars + slot);
  };
  const int all = min(t1 - t0, S), n0 = min(all, kFirstCopies<Job>);
  // The lanes of one warp issue the copies: warp 0, but for a job whose rows
  // come after the wait without routing (down) the last warp, which stages the
  // fewest columns (down's: none), so the staging's L2 reads go out at the
  // wait instead of behind the rows' lookup and ahead of the copies' data.
  constexpr int kIssuer = !Job::kEarly && !Job::kRoutes ? kWarps - 1 : 0;
  auto issue_range = [&](int a, int b) {
    const int n = (b - a) * P;
    const int lane0 = int(threadIdx.x) - 32 * kIssuer;
    for (int i = lane0; lane0 >= 0 && lane0 < 32 && i < n; i += 32)
      issue(t0 + a + tile_of(i), piece_of(i));
  };
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) mbar_init(bars + i);
    mbar_init_fence();
  }
  __syncthreads();
  if constexpr (Job::kEarly) issue_range(0, n0);
  TERN_TRACE_MARK(issued);
  const Cols mine = warp_cols<RPW>(rounds);
  job.before_wait(reinterpret_cast<float*>(base), t0, t1, mine);
  pdl_wait();
  TERN_TRACE_MARK(waited);
  if constexpr (!Job::kEarly && !Job::kRoutes) issue_range(0, n0);
  if constexpr (Job::kRoutes) {
    const long long fed = job.fetch();
    TERN_TRACE_MARK(fetched);
    job.route(fed);
    TERN_TRACE_MARK(picked);
    issue_range(0, n0);  // warp 0 (the issuer), which picked; the others wait at the barrier
    __syncthreads();
    pdl_launch_dependents();
  }
  if constexpr (!Job::kEarly) TERN_TRACE_MARK(issued);
  float* red = nullptr;
  const Staged xs = job.stage(reinterpret_cast<float*>(base + lay.stage), &red, mine);
  issue_range(n0, all);
  if (threadIdx.x == 0) l2_ahead(job.ahead());
  TERN_TRACE_MARK(staged);
  const auto pre = job.preload(t0, t1);
  Sums sums{nullptr, TB * 16, min(kWarps, (rounds + RPW - 1) / RPW), 1.0f};
  // Batch b0's sums reduced across warps through red half `half`; its stages
  // are refilled once every warp is past them.
  int half = 0;
  // The batch's first stage and its phase, kept as the batches advance (no
  // division in the loop: the kernels are issue-bound).
  int slot0 = 0;
  uint32_t phase0 = 0;
  for (int b0 = t0; b0 < t1; b0 += TB, half ^= 1) {
    float acc[TB][2] = {};
#pragma unroll
    for (int j = 0; j < RPW; ++j)
      if (warp * RPW + j < rounds) {
        const int r = warp * RPW + j;
        const Fragment f = fragment(xs, 4 * r);
#pragma unroll
        for (int tt = 0; tt < TB; ++tt)
          if (b0 + tt < t1) {
            int slot = tt;
            uint32_t parity = 0;
            if constexpr (!kOne) {
              // TB <= S: the batch wraps round the ring at most once.
              const bool wrap = slot0 + tt >= S;
              slot = wrap ? slot0 + tt - S : slot0 + tt;
              parity = (phase0 + wrap) & 1u;
            }
            // Each tile as it lands (a passed phase returns at once).
            mbar_wait(bars + slot, parity);
            if (b0 == t0 && b0 + tt == min(t1, b0 + TB) - 1) TERN_TRACE_MARK(landed);
            round_dot(img.read(stage_at(slot), r), f, acc[tt][0], acc[tt][1]);
          }
      }
    float* rd = red + half * kWarps * TB * 16;
#pragma unroll
    for (int tt = 0; tt < TB; ++tt) {
      const float v0 = quad_sum(acc[tt][0]), v8 = quad_sum(acc[tt][1]);
      if ((lane & 3) == 0) {
        rd[warp * TB * 16 + tt * 16 + g] = v0;
        rd[warp * TB * 16 + tt * 16 + g + 8] = v8;
      }
    }
    if (b0 == t0) TERN_TRACE_MARK(dotted);
    __syncthreads();
    if constexpr (!kOne) {
      slot0 += TB;
      if (slot0 >= S) slot0 -= S, phase0 ^= 1u;
      // The freed stages' refills from the last warp (the epilogues use the first).
      if (warp == kWarps - 1)
        for (int i = lane; i < TB * P && b0 + tile_of(i) + S < t1; i += 32)
          issue(b0 + tile_of(i) + S, piece_of(i));
    }
    if (b0 == t0) {
      // Every warp's staging is past the barrier: the RMSNorm factor.
      sums.scale = xs.norm();
      if constexpr (Job::kRoutes) job.settle(sums.scale);
      TERN_TRACE_MARK(synced);
    }
    Sums s = sums;
    s.p = rd;
    job.finish(b0, t0, t1, s, pre);
    if (b0 == t0) TERN_TRACE_MARK(first);
  }
  TERN_TRACE_END();
}

// The rows a launch of Job covers (grid.z): one, or EachRow's.
template <typename Job>
unsigned grid_rows(const Job&) {
  return 1;
}

// A job of the per-row MoE kernels for each row of a step (rows.h): block
// (x, 0, z) does a share of row z's tiles, each tile exactly as the job alone
// does it (a tile's sums do not depend on the block that takes it); the shapes
// (tiles, rounds, image) are the same in every row. The rows' blocks share
// the SMs (blocks() below), each streaming its tiles through a wide ring: the
// rows' expert bytes grow with the rows, so they run at the copy rate rather
// than in waves of one row's latency.
template <typename Job>
struct EachRow {
  Job row[kMaxRows];
  int n = 0;
  static constexpr bool kEarly = Job::kEarly, kRoutes = Job::kRoutes, kNarrow = false;
  static constexpr int kAlign = Job::kAlign;
  __device__ const Job& mine() const { return row[blockIdx.z]; }
  __host__ __device__ int tiles() const { return row[0].tiles(); }
  __host__ __device__ int rounds() const { return row[0].rounds(); }
  __host__ __device__ int cols() const { return row[0].cols(); }
  __host__ __device__ TileImage image() const { return row[0].image(); }
  __host__ __device__ int pieces() const { return row[0].pieces(); }
  size_t extra_floats(int blocks) const { return row[0].extra_floats(blocks); }
  __device__ void before_wait(float* extra, int t0, int t1, Cols mine_cols) const {
    mine().before_wait(extra, t0, t1, mine_cols);
  }
  __device__ void copy(int t, int p, uint8_t* st, uint64_t* bar) const {
    mine().copy(t, p, st, bar);
  }
  __device__ Staged stage(float* sm, float** red, Cols mine_cols) const {
    return mine().stage(sm, red, mine_cols);
  }
  __device__ long long fetch() const { return mine().fetch(); }
  __device__ void route(long long fed) const { mine().route(fed); }
  __device__ void settle(float norm) const { mine().settle(norm); }
  // The rows' tiles are the same: row 0's blocks bring them into L2.
  __device__ L2Ahead ahead() const { return blockIdx.z == 0 ? mine().ahead() : L2Ahead{}; }
  __device__ auto preload(int t0, int t1) const { return mine().preload(t0, t1); }
  template <typename Pre>
  __device__ void finish(int b0, int t0, int t1, const Sums& s, const Pre& pre) const {
    mine().finish(b0, t0, t1, s, pre);
  }
};

template <typename Job>
unsigned grid_rows(const EachRow<Job>& j) {
  return unsigned(j.n);
}

// A row's blocks: the SMs shared among the rows.
template <typename Job>
int blocks(const EachRow<Job>& j) {
  return std::max(1, std::min(j.tiles() / Job::kAlign, sm_count() / j.n));
}

template <int RPW, int TB, bool kOne, typename Job>
cudaError_t launch_as(const Job& job, cudaStream_t st) {
  if (job.rounds() > RPW * kWarps || (kOne && per_block(job) > TB)) return cudaErrorInvalidValue;
  const Layout<TB, Job> lay(job);
  if (lay.stages < std::min(TB, per_block(job))) return cudaErrorInvalidValue;
  return launch_pdl(&gemv_kernel<RPW, TB, kOne, Job>, dim3(blocks(job), 1, grid_rows(job)),
                    dim3(kThreads), lay.total, st, job, lay);
}

template <int RPW, int TB, typename Job>
cudaError_t launch(const Job& job, cudaStream_t st) {
  return per_block(job) <= TB ? launch_as<RPW, TB, true>(job, st)
                              : launch_as<RPW, TB, false>(job, st);
}

// Blocks of at most 6 tiles take them in one batch (every per-layer GEMV);
// longer runs go in batches of 3 through the ring.
template <int RPW, typename Job>
cudaError_t launch_batched(const Job& job, cudaStream_t st) {
  return per_block(job) <= 6 ? launch_as<RPW, 6, true>(job, st) : launch_as<RPW, 3, false>(job, st);
}

// The dense GEMV over the rows of a step (rows.h): n jobs over one matrix,
// each with its own input and output. Each tile comes into the ring once and
// is dotted with every row's staged input, kGroupRows rows a pass over the
// batch; a row's sums take the same rounds per warp, the same order and the
// same warp reduction as the job alone (gemv_kernel), so each row's outputs
// are bit for bit its single-row launch's. The constants before_wait brings
// (norm weights, a router's columns) are the same in every row: row 0's.
constexpr int kGroupRows = 4;

// The shared memory of n rows' launch (and n itself).
template <int TB, typename Job>
struct RowsLayout {
  size_t extra, ring, bars, stage, stage_stride, red, total;
  int stages, n;
  RowsLayout(const Job& job, int rows) : n(rows) {
    extra = align128(sizeof(float) * job.extra_floats(blocks(job)));
    stage_stride = align128(stage_bytes(job.cols(), 0));
    const size_t red_bytes = sizeof(float) * kGroupRows * kWarps * TB * 16;
    const size_t fixed = extra + 8 * kMaxStages + size_t(n) * stage_stride + red_bytes;
    // The wide class where a ring of a batch fits beside it, else an SM's all.
    const size_t tb_ring = size_t(TB) * job.image().bytes();
    const size_t cap = fixed + tb_ring <= kWideSmem ? kWideSmem : kMaxSmem;
    const size_t fit = fixed < cap ? (cap - fixed) / job.image().bytes() : 0;
    stages = int(std::min<size_t>({fit, size_t(per_block(job)), size_t(kMaxStages)}));
    ring = extra;
    bars = ring + size_t(stages) * job.image().bytes();
    stage = bars + 8 * kMaxStages;
    red = stage + size_t(n) * stage_stride;
    total = std::max(red + red_bytes, kWideSmem);
  }
};

// Row r's staged view: stage() laid out the same way `stride` bytes further.
__device__ __forceinline__ Staged staged_row(const Staged& s0, size_t stride, int r) {
  const size_t off = size_t(r) * stride;
  auto move = [&](const auto* p) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(p)>>;
    return p == nullptr ? p : reinterpret_cast<const T*>(reinterpret_cast<const uint8_t*>(p) + off);
  };
  return {move(s0.part), move(s0.xsum), move(s0.scale), s0.K, move(s0.wsq), s0.eps};
}

template <int RPW, int TB, typename Job>
__global__ void __launch_bounds__(kThreads, 2)
    rows_kernel(const __grid_constant__ RowArgs<Job> jobs, RowsLayout<TB, Job> lay) {
  static_assert(Job::kEarly && !Job::kRoutes && Job::kAlign == 1 && !Job::kNarrow);
  extern __shared__ float4 sm4[];
  pdl_launch_dependents();
  const Job& job = jobs.row[0];
  const int n = lay.n, tiles = job.tiles(), rounds = job.rounds(), S = lay.stages;
  const int blk = int(blockIdx.x), grid = int(gridDim.x);
  const int t0 = split_at(blk, tiles, grid), t1 = split_at(blk + 1, tiles, grid);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
  uint8_t* const base = reinterpret_cast<uint8_t*>(sm4);
  uint8_t* const ring = base + lay.ring;
  uint64_t* const bars = reinterpret_cast<uint64_t*>(base + lay.bars);
  float* const red = reinterpret_cast<float*>(base + lay.red);
  const TileImage img = job.image();
  auto stage_at = [&](int slot) { return ring + size_t(slot) * img.bytes(); };
  auto issue = [&](int t) {
    const int slot = (t - t0) % S;
    mbar_arrive_expect(bars + slot, img.bytes());
    job.copy(t, 0, stage_at(slot), bars + slot);
  };
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) mbar_init(bars + i);
    mbar_init_fence();
  }
  __syncthreads();
  const int all = min(t1 - t0, S);
  if (warp == 0)
    for (int t = t0 + lane; t < t0 + all; t += 32) issue(t);
  const Cols mine = warp_cols<RPW>(rounds);
  job.before_wait(reinterpret_cast<float*>(base), t0, t1, mine);
  pdl_wait();
  float* unused = nullptr;
  Staged xs0{};
  // A row at a time, the next row's words on their way into L1 meanwhile.
  for (int r = 0; r < n; ++r) {
    if (r + 1 < n) jobs.row[r + 1].prefetch(mine);
    const Staged xs = jobs.row[r].stage(
        reinterpret_cast<float*>(base + lay.stage + size_t(r) * lay.stage_stride), &unused, mine);
    if (r == 0) xs0 = xs;
  }
  const int warps = min(kWarps, (rounds + RPW - 1) / RPW);
  int slot0 = 0;
  uint32_t phase0 = 0;
  for (int b0 = t0; b0 < t1; b0 += TB) {
    for (int r0 = 0; r0 < n; r0 += kGroupRows) {
      float acc[TB][kGroupRows][2] = {};
#pragma unroll
      for (int j = 0; j < RPW; ++j)
        if (warp * RPW + j < rounds) {
          const int rd = warp * RPW + j;
#pragma unroll
          for (int tt = 0; tt < TB; ++tt)
            if (b0 + tt < t1) {
              // TB <= S: the batch wraps round the ring at most once.
              const bool wrap = slot0 + tt >= S;
              const int slot = wrap ? slot0 + tt - S : slot0 + tt;
              mbar_wait(bars + slot, (phase0 + wrap) & 1u);
              const Load l = img.read(stage_at(slot), rd);
#pragma unroll
              for (int k = 0; k < kGroupRows; ++k)
                if (r0 + k < n) {
                  const Fragment f = fragment(staged_row(xs0, lay.stage_stride, r0 + k), 4 * rd);
                  round_dot(l, f, acc[tt][k][0], acc[tt][k][1]);
                }
            }
        }
#pragma unroll
      for (int k = 0; k < kGroupRows; ++k)
#pragma unroll
        for (int tt = 0; tt < TB; ++tt) {
          const float v0 = quad_sum(acc[tt][k][0]), v8 = quad_sum(acc[tt][k][1]);
          float* rd = red + (k * kWarps + warp) * TB * 16 + tt * 16;
          if ((lane & 3) == 0) rd[g] = v0, rd[g + 8] = v8;
        }
      // What the epilogues read from earlier kernels, before any of them writes.
      decltype(job.preload(t0, t1)) pre[kGroupRows];
#pragma unroll
      for (int k = 0; k < kGroupRows; ++k)
        if (r0 + k < n) pre[k] = jobs.row[r0 + k].preload(t0, t1);
      __syncthreads();
      if (r0 + kGroupRows >= n) {
        // Every warp is past the batch's stages: refill them.
        if (warp == kWarps - 1)
          for (int tt = lane; tt < TB && b0 + tt + S < t1; tt += 32) issue(b0 + tt + S);
      }
#pragma unroll
      for (int k = 0; k < kGroupRows; ++k)
        if (r0 + k < n) {
          const Staged xs = staged_row(xs0, lay.stage_stride, r0 + k);
          const Sums s{red + k * kWarps * TB * 16, TB * 16, warps, xs.norm()};
          jobs.row[r0 + k].finish(b0, t0, t1, s, pre[k]);
        }
      __syncthreads();  // red is the next group's
    }
    slot0 += TB;
    if (slot0 >= S) slot0 -= S, phase0 ^= 1u;
  }
}

template <int RPW, int TB, typename Job>
cudaError_t launch_rows(const RowArgs<Job>& jobs, int n, cudaStream_t st) {
  const Job& job = jobs.row[0];
  if (!rows_fit(n) || job.rounds() > RPW * kWarps) return cudaErrorInvalidValue;
  const RowsLayout<TB, Job> lay(job, n);
  if (lay.stages < std::min(TB, per_block(job)) || lay.total > kMaxSmem)
    return cudaErrorInvalidValue;
  return launch_pdl(&rows_kernel<RPW, TB, Job>, dim3(blocks(job)), dim3(kThreads), lay.total, st,
                    jobs, lay);
}

}  // namespace tern::cuda::tile
