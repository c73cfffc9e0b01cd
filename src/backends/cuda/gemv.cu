// Batch-1 GEMV over an affine 4/8-bit matrix, with an optional RMSNorm of the
// input in the prologue (every block recomputes it: 2K floats from L2 are
// cheaper than a kernel; per head with a gate for the GDN out_proj) and three
// epilogues: store, residual add (optionally feeding the next router's
// logits), and the GDN causal conv + SiLU + conv-state update (rows < channels).
#include <algorithm>

#include "backends/cuda/gemv.h"
#include "backends/cuda/host_state.h"
#include "backends/cuda/qdot.cuh"
#include "backends/cuda/tile_gemv.cuh"

namespace tern::cuda {

namespace {

constexpr int kThreads = 256;

// The conv of channel r < channels with its new input acc: w = its Kc
// weights, st = its state column (stride apart; a copy or cv.state itself).
__device__ __forceinline__ void conv_row(const ConvArgs& cv, int r, float acc, const float* w,
                                         const float* st, int stride) {
  const int Kc = cv.kernel, Ch = cv.channels;
  float s = w[Kc - 1] * acc;
  for (int j = 0; j < Kc - 1; ++j) s += w[j] * st[j * stride];
  cv.out[r] = siluf(s);
  for (int j = 0; j + 1 < Kc - 1; ++j) cv.state[size_t(j) * Ch + r] = st[(j + 1) * stride];
  cv.state[size_t(Kc - 2) * Ch + r] = acc;
}

// What the conv epilogue stores for row r: SiLU-ed for the gate rows.
__device__ __forceinline__ float conv_stored(const ConvArgs& cv, int r, float acc) {
  return r >= cv.channels && r < cv.channels + cv.gate_rows ? siluf(acc) : acc;
}

// The epilogue for output row r.
__device__ __forceinline__ void finish_row(const GemvArgs& a, int r, float acc) {
  if (a.out == GemvOut::add) {
    a.y[r] += acc;
    return;
  }
  const ConvArgs& cv = a.conv;
  a.y[r] = a.out == GemvOut::conv ? conv_stored(cv, r, acc) : acc;
  if (a.out == GemvOut::conv && r < cv.channels)
    conv_row(cv, r, acc, cv.weight + size_t(r) * cv.kernel, cv.state + r, cv.channels);
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

// The tensor-core path (tile_gemv.cuh) for 4-bit matrices: rows in order,
// weights loaded before the previous kernel ends. Constants the epilogue needs
// are copied into shared memory before the wait too: feeding a router (one
// tile per block), the block's 16 columns of every router row (16 codes and
// their group's scale|bias word); with the conv, its channels' weights and
// state (written by the previous step). P: how the input is staged, F: what
// becomes of the sums (one variant of each a kernel, so neither the staging
// nor the epilogue branches on the arguments: the kernels are issue-bound).
// kRows: a row of gemv_rows, whose conv reads its state where it lives (the
// block's shared constants are row 0's).
enum class Fin { store, add, feed, conv };
template <tile::Prep P, Fin F, bool kRows = false>
struct DenseJob {
  GemvArgs a;
  int br = 0;  // block_rows of the launch (launch_tiled sets it)
  static constexpr bool kEarly = true, kRoutes = false;
  static constexpr int kAlign = 1;
  static constexpr bool kNarrow = false;
  __host__ __device__ int tiles() const { return (a.W.rows + 15) / 16; }
  __host__ __device__ int rounds() const { return a.W.cols / tile::kRound; }
  __host__ __device__ int cols() const { return a.W.cols; }
  __host__ __device__ int block_rows(int blocks) const {
    return (tiles() + blocks - 1) / blocks * 16;
  }
  // A whole-vector RMSNorm's weights (constant) come into shared memory before
  // the wait too, after the epilogue's constants.
  static constexpr bool kWholeNorm = P == tile::Prep::norm;
  // The epilogue's constants (br: no division on the device).
  __host__ __device__ size_t epilogue_floats() const {
    if constexpr (F == Fin::feed) {
      const size_t rows = size_t(a.feed.W.rows);
      return 4 * rows + (rows + 3) / 4 * 4;  // codes, then scale|bias words
    }
    if constexpr (F == Fin::conv && !kRows) return size_t(br) * (2 * a.conv.kernel - 1);
    return 0;
  }
  __host__ __device__ size_t norm_at() const { return (epilogue_floats() + 3) / 4 * 4; }
  __host__ __device__ size_t extra_floats(int) const {
    return kWholeNorm ? norm_at() + size_t(cols()) : epilogue_floats();
  }
  __device__ void before_wait(float* extra, int t0, int t1, tile::Cols mine) const {
    if constexpr (F == Fin::feed) {
      const DMat& R = a.feed.W;
      uint4* q = reinterpret_cast<uint4*>(extra);
      uint32_t* sb = reinterpret_cast<uint32_t*>(q + R.rows);
      const int c0 = t0 * 16;
      for (int e = int(threadIdx.x); e < R.rows; e += int(blockDim.x)) {
        cp_async16(q + e, reinterpret_cast<const uint8_t*>(R.w) + size_t(e) * R.cols + c0);
        cp_async4(sb + e, R.sb + size_t(e) * (R.cols / kGroup) + c0 / kGroup);
      }
    } else if constexpr (F == Fin::conv && !kRows) {
      // [kernel-1][block rows] state, then [block rows][kernel] weights, in
      // 16-byte pieces (channels and the tile starts are multiples of 4).
      const ConvArgs& cv = a.conv;
      const int r0 = t0 * 16, n = min(t1 * 16, cv.channels) - r0;
      const int Kc = cv.kernel, state_pieces = (Kc - 1) * (n / 4);
      for (int p = int(threadIdx.x); n > 0 && p < state_pieces + n * Kc / 4; p += int(blockDim.x)) {
        if (p < state_pieces) {
          const int j = p / (n / 4), c = p % (n / 4) * 4;
          cp_async16(extra + j * br + c, cv.state + size_t(j) * cv.channels + r0 + c);
        } else {
          const int c = (p - state_pieces) * 4;
          cp_async16(extra + (Kc - 1) * br + c, cv.weight + size_t(r0) * Kc + c);
        }
      }
    }
    if constexpr (kWholeNorm) tile::stage_copy(extra + norm_at(), a.norm, mine);
    cp_async_commit();
  }
  __host__ __device__ tile::TileImage image() const { return {a.W.cols}; }
  __host__ __device__ int pieces() const { return 1; }
  __device__ void copy(int t, int, uint8_t* st, uint64_t* bar) const {
    tile::copy_tile(a.W, size_t(t), st, bar);
  }
  // The words stage() reads next, into L1 (a row of gemv_rows).
  __device__ void prefetch(tile::Cols mine) const { tile::stage_prefetch(a.x, a.gate, mine); }
  // before_wait's copies (out long before) complete: the norm weights are the
  // thread's own (stage_copy), and the epilogue's constants become visible to
  // the block at the barrier after the dot products (no barrier here: a
  // barrier costs issue slots, and the decode kernels are issue-bound).
  __device__ tile::Staged stage(float* sm, float** red, tile::Cols mine) const {
    extern __shared__ float4 sm4[];
    cp_async_wait<0>();
    tile::PrepArgs pa{.norm = a.norm, .eps = a.eps, .norm_group = a.norm_group, .gate = a.gate};
    if constexpr (kWholeNorm) pa.norm = reinterpret_cast<const float*>(sm4) + norm_at();
    return tile::stage<P>(a.x, cols(), pa, sm, red, mine);
  }
  // Nothing into L2: down brings the next layer's weights in (cuda_backend).
  __device__ L2Ahead ahead() const { return {}; }
  // Feeding, row lane % 16 of the block's tile: y read before the dot
  // products (so the epilogue reads it before warp 0 writes it without a
  // barrier, and its L2 round trip is off the critical path), and the norm.
  struct Pre {
    float y = 0.0f, norm = 0.0f;
  };
  __device__ Pre preload(int t0, int t1) const {
    const int r = t0 * 16 + int(threadIdx.x & 15);
    if (F != Fin::feed || t0 >= t1 || r >= a.W.rows) return {};
    return {a.y[r], a.feed.norm[r]};
  }
  __device__ void finish(int b0, int t0, int t1, const tile::Sums& s, const Pre& pre) const {
    extern __shared__ float4 sm4[];
    const float* extra = reinterpret_cast<const float*>(sm4);
    const int i = int(threadIdx.x), row = b0 * 16 + i;
    const bool mine = i < s.stride && b0 + i / 16 < t1 && row < a.W.rows;
    if constexpr (F == Fin::conv) {
      const ConvArgs& cv = a.conv;
      if (!mine) return;
      const float acc = s.row(i);
      a.y[row] = conv_stored(cv, row, acc);
      const int c = row - t0 * 16;
      if (row >= cv.channels) return;
      if constexpr (kRows)
        conv_row(cv, row, acc, cv.weight + size_t(row) * cv.kernel, cv.state + row, cv.channels);
      else
        conv_row(cv, row, acc, extra + (cv.kernel - 1) * br + c * cv.kernel, extra + c, br);
      return;
    }
    if constexpr (F == Fin::store || F == Fin::add) {
      if (!mine) return;
      if constexpr (F == Fin::add)
        a.y[row] += s.row(i);
      else
        a.y[row] = s.row(i);
      return;
    }
    // Feeding: y += sums (GemvOut::add), then the router's share of this
    // block's 16 rows (one tile a block: gemv_feeds). Every warp finishes the
    // rows itself in its lanes 0-15, from y and the norm as preloaded, and
    // trades them by shuffles, so no warp waits for another (warp 0 writes y).
    const int j = i & 15, r = b0 * 16 + j;
    const bool on = b0 < t1 && r < a.W.rows;
    float v = on ? pre.y + s.row(j) : 0.0f;
    if (on && i < 16) a.y[r] = v;
    v *= pre.norm;
    float x[16], sx = 0.0f;
#pragma unroll
    for (int k = 0; k < 16; ++k) sx += x[k] = __shfl_sync(kFull, v, k);
    const DMat& R = a.feed.W;
    const uint4* q = reinterpret_cast<const uint4*>(extra);
    const uint32_t* sb = reinterpret_cast<const uint32_t*>(q + R.rows);
    unsigned long long* acc = a.feed.acc + size_t(blockIdx.x % kFeedCopies) * R.rows;
    for (int e = i; e < R.rows; e += int(blockDim.x)) {
      const uint4 c = q[e];
      const uint32_t w[4] = {c.x, c.y, c.z, c.w};
      float qx = 0.0f;
#pragma unroll
      for (int k = 0; k < 16; ++k) qx += byte_to_float(w[k / 4], k % 4) * x[k];
      const float u = sb_scale(sb[e]) * qx + sb_bias(sb[e]) * sx;
      atomicAdd(acc + e, static_cast<unsigned long long>(__float2ll_rn(u * 0x1p32f)));
    }
  }
};

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

TERN_TRACE_BINDER(gemv)

namespace {
bool tiled(const DMat& W) {
  return W.tiles != nullptr && gemv_tiles(W);
}

// The tensor-core launch for staging P and epilogue F.
template <tile::Prep P, Fin F>
cudaError_t launch_tiled(const GemvArgs& a, cudaStream_t st) {
  DenseJob<P, F> job{a};
  job.br = job.block_rows(tile::blocks(job));
  return job.rounds() > tile::kWarps ? tile::launch<2, 1>(job, st)
                                     : tile::launch_batched<1>(job, st);
}

template <tile::Prep P>
cudaError_t launch_tiled(const GemvArgs& a, cudaStream_t st) {
  if (a.feed.acc != nullptr) return launch_tiled<P, Fin::feed>(a, st);
  if (a.out == GemvOut::conv) return launch_tiled<P, Fin::conv>(a, st);
  if (a.out == GemvOut::add) return launch_tiled<P, Fin::add>(a, st);
  return launch_tiled<P, Fin::store>(a, st);
}

}  // namespace

// Up to 32 rounds: two a warp.
bool gemv_tiles(const DMat& m) {
  return tileable(m) && m.cols / tile::kRound <= 2 * tile::kWarps;
}

L2Ahead gemv_ahead(const DMat& W) {
  if (!tiled(W)) return {};
  using Job = DenseJob<tile::Prep::plain, Fin::store>;  // the tiles' split is the same for all
  const Job job{{.W = W}};
  return {W.tiles, job.image().bytes(), job.tiles(), tile::blocks(job), tile::kFirstCopies<Job>};
}

bool gemv_feeds(const DMat& W) {
  return tiled(W) && W.rows % 16 == 0 && W.rows / 16 <= sm_count();
}

namespace {

bool gemv_takes(const GemvArgs& a) {
  if (a.feed.acc != nullptr && (a.out != GemvOut::add || !gemv_feeds(a.W) || a.feed.W.bits != 8 ||
                                a.feed.W.cols != a.W.rows))
    return false;
  const int ng = a.norm_group;
  return ng == 0 || (tiled(a.W) && ng >= 8 && ng <= tile::kRound && (ng & (ng - 1)) == 0 &&
                     a.W.cols % ng == 0 && a.norm != nullptr && a.gate != nullptr);
}

// The rows' launch for staging P and epilogue F.
template <tile::Prep P, Fin F>
cudaError_t launch_rows(const GemvArgs* rows, int n, cudaStream_t st) {
  using Job = DenseJob<P, F, true>;
  RowArgs<Job> jobs;
  for (int i = 0; i < n; ++i) jobs.row[i] = Job{rows[i]};
  return jobs.row[0].rounds() > tile::kWarps ? tile::launch_rows<2, 2>(jobs, n, st)
                                             : tile::launch_rows<1, 2>(jobs, n, st);
}

template <tile::Prep P>
cudaError_t launch_rows(const GemvArgs* rows, int n, cudaStream_t st) {
  const GemvArgs& a = rows[0];
  if (a.feed.acc != nullptr) return launch_rows<P, Fin::feed>(rows, n, st);
  if (a.out == GemvOut::conv) return launch_rows<P, Fin::conv>(rows, n, st);
  if (a.out == GemvOut::add) return launch_rows<P, Fin::add>(rows, n, st);
  return launch_rows<P, Fin::store>(rows, n, st);
}

// Whether row b runs as row a does but for its own vectors.
bool same_launch(const GemvArgs& a, const GemvArgs& b) {
  return a.W.tiles == b.W.tiles && a.W.w == b.W.w && a.W.rows == b.W.rows && a.W.cols == b.W.cols &&
         a.out == b.out && a.norm == b.norm && a.eps == b.eps && a.norm_group == b.norm_group &&
         (a.feed.acc == nullptr) == (b.feed.acc == nullptr) && a.feed.W.w == b.feed.W.w &&
         a.feed.norm == b.feed.norm && a.conv.weight == b.conv.weight &&
         a.conv.channels == b.conv.channels && a.conv.kernel == b.conv.kernel &&
         a.conv.gate_rows == b.conv.gate_rows && (a.gate == nullptr) == (b.gate == nullptr);
}

}  // namespace

cudaError_t gemv_rows(const GemvArgs* rows, int n, cudaStream_t st) {
  if (!rows_fit(n)) return cudaErrorInvalidValue;
  for (int i = 0; i < n; ++i)
    if (!gemv_takes(rows[i]) || !same_launch(rows[0], rows[i])) return cudaErrorInvalidValue;
  const GemvArgs& a = rows[0];
  // Off the tensor-core path (the small test shapes) a launch a row.
  if (!tiled(a.W)) {
    for (int i = 0; i < n; ++i)
      if (cudaError_t e = gemv(rows[i], st); e != cudaSuccess) return e;
    return cudaSuccess;
  }
  note_path(KernelPath::gemv_rows);
  if (a.norm_group != 0) return launch_rows<tile::Prep::gated>(rows, n, st);
  if (a.norm != nullptr) return launch_rows<tile::Prep::norm>(rows, n, st);
  return launch_rows<tile::Prep::plain>(rows, n, st);
}

cudaError_t gemv(const GemvArgs& a, cudaStream_t st) {
  if (!gemv_takes(a)) return cudaErrorInvalidValue;
  const int ng = a.norm_group;
  if (tiled(a.W)) {
    note_path(KernelPath::gemv_tile);
    if (a.feed.acc != nullptr) note_path(KernelPath::gemv_feed);
    if (ng != 0) {
      note_path(KernelPath::gemv_tile_gated);
      return launch_tiled<tile::Prep::gated>(a, st);
    }
    if (a.norm != nullptr) return launch_tiled<tile::Prep::norm>(a, st);
    return launch_tiled<tile::Prep::plain>(a, st);
  }
  if (a.W.w == nullptr) return cudaErrorInvalidValue;
  note_path(KernelPath::gemv_simt);
  if (a.W.bits == 4) return launch<4>(a, st);
  if (a.W.bits == 8) return launch<8>(a, st);
  return cudaErrorInvalidValue;
}

}  // namespace tern::cuda
