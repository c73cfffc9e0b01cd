// MoE decode: the routing (top-k of the logits the previous GEMV fed, or a
// router launch: norm + 8-bit GEMV + top-k + renormalise) and gate/up/SwiGLU of
// the routed and shared experts in one launch (two where the shapes do not
// allow), and down + routing weights + shared gate + residual add in one launch.
#include "backends/cuda/host_state.h"
#include "backends/cuda/moe.h"
#include "backends/cuda/pick.cuh"
#include "backends/cuda/qdot.cuh"
#include "backends/cuda/tile_gemv.cuh"

namespace tern::cuda {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32, kMaxExperts = 1024;

// The expert of a slot: the router's choices, then the shared expert (stored
// as expert n_experts).
template <typename Args>
__device__ __forceinline__ int slot_expert(const Args& a, int slot) {
  return slot < a.top_k ? a.ids[slot] : a.n_experts;
}

// route_up's pick: keys for just the experts there are (8 a lane up to 256,
// else 16: route_up takes at most tile::kThreads experts).
__device__ __forceinline__ Choice pick_routed(const float* p, int E, int top_k) {
  return E <= 256 ? pick_experts<8>(p, E, top_k) : pick_experts<tile::kThreads / 32>(p, E, top_k);
}

// The routing weights of a warp's choice (lanes < top_k): the softmax over
// all experts renormalised over the chosen k, which is the softmax over the k
// (the full normaliser cancels). `scale` multiplies the logits.
__device__ float expert_weight(const Choice& c, int top_k, float scale) {
  const bool mine = int(threadIdx.x & 31) < top_k;
  const float m = warp_max(mine ? c.logit : -INFINITY);
  const float e = mine ? expf(scale * (c.logit - m)) : 0.0f;
  return __fdividef(e, warp_sum(e));  // the sum is at least 1 (the top expert's term)
}

// Writes the choice out for the down kernel: ids, weights and the shared
// expert's gate (from its logit, l[E] unscaled). One warp.
template <typename Args>
__device__ void write_choice(const Args& a, const Choice& c, float shared_logit, float scale) {
  const int lane = threadIdx.x & 31;
  const float w = expert_weight(c, a.top_k, scale);
  if (lane < a.top_k) a.ids[lane] = c.id, a.wts[lane] = w;
  if (lane == 0) a.wts[a.top_k] = sigmoidf(scale * shared_logit);
}

__global__ void __launch_bounds__(kThreads) router_kernel(RouterArgs a) {
  using C = Chunk<8>;
  extern __shared__ float4 sm4[];
  pdl_launch_dependents();
  const int K = a.W.cols, NC = K / C::kCodes, E = a.W.rows - 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int lpr = lanes_per_row(NC), rpw = 32 / lpr, sub = lane / lpr, sl = lane % lpr;
  const int r = (blockIdx.x * kWarps + warp) * rpw + sub;
  if (r < a.W.rows) prefetch_row<8>(a.W, size_t(r), sl, lpr);
  pdl_wait();
  const StagedX xs = stage_x<8>(a.h, K, a.norm, a.eps, reinterpret_cast<float*>(sm4));
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < K; i += kThreads) a.a[i] = staged_value<8>(xs, i);
  float acc = r < a.W.rows ? row_dot<8>(a.W, size_t(r), xs, sl, lpr) : 0.0f;
  acc = group_sum(acc, lpr);
  if (sl == 0 && r < a.W.rows) a.logits[r] = acc;
  if (!last_block(a.counter)) return;

  __shared__ float p[kMaxExperts + 1];
  for (int e = threadIdx.x; e <= E; e += kThreads) p[e] = __ldcg(a.logits + e);
  __syncthreads();
  if (warp == 0) write_choice(a, pick_experts<kMaxExperts / 32>(p, E, a.top_k), p[E], 1.0f);
}

__global__ void __launch_bounds__(kThreads) experts_up_kernel(ExpertsUpArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  using C = Chunk<4>;
  extern __shared__ float4 sm4[];
  const int K = a.gate_up.cols, NC = K / C::kCodes, I = a.inter;
  const StagedX xs = stage_x<4>(a.a, K, nullptr, 0.0f, reinterpret_cast<float*>(sm4));
  const int slot = blockIdx.y;
  const size_t e = size_t(slot_expert(a, slot));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int lpr = lanes_per_row(NC), rpw = 32 / lpr, sub = lane / lpr, sl = lane % lpr;
  const int f = (blockIdx.x * kWarps + warp) * rpw + sub;
  const size_t rows[2] = {e * 2 * I + f, e * 2 * I + I + f};  // gate row, up row
  float gu[2] = {0.0f, 0.0f};
  const int xoff[2] = {0, 0};
  if (f < I) rows_dot<4, 2, 2>(a.gate_up, rows, xoff, 2, xs, sl, lpr, gu);
  const float g = group_sum(gu[0], lpr), u = group_sum(gu[1], lpr);
  if (sl == 0 && f < I) a.act[slot * I + f] = siluf(g) * u;
}

// At most 128 registers: two blocks per SM keep enough loads in flight.
__global__ void __launch_bounds__(kThreads, 2) experts_down_kernel(ExpertsDownArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  using C = Chunk<4>;
  extern __shared__ float4 sm4[];
  const int I = a.down.cols, D = a.down.rows / (a.n_experts + 1), slots = a.top_k + 1;
  const int NCs = I / C::kCodes;  // chunks per slot
  const StagedX xs = stage_x<4>(a.act, I * slots, nullptr, 0.0f, reinterpret_cast<float*>(sm4));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int lpr = lanes_per_row(NCs), rpw = 32 / lpr, sub = lane / lpr, sl = lane % lpr;
  const int d = (blockIdx.x * kWarps + warp) * rpw + sub;
  // Each slot's row dotted with its own part of the staged activations (slot
  // s's chunk 0 is staged chunk s * NCs); all slots' loads go out together.
  constexpr int kSlots = kMaxTopK + 1;
  size_t rows[kSlots];
  int xoff[kSlots];
  float part[kSlots];
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const size_t e = size_t(slot_expert(a, s));
    rows[s] = e * D + d;
    xoff[s] = s * NCs;
    part[s] = 0.0f;
  }
  if (d < D) rows_dot<4, kSlots, 1>(a.down, rows, xoff, slots, xs, sl, lpr, part);
  float acc = 0.0f;
#pragma unroll
  for (int s = 0; s < kSlots; ++s)
    if (s < slots) acc += a.wts[s] * part[s];
  acc = group_sum(acc, lpr);
  if (sl == 0 && d < D) a.h[d] += acc;
}

// Tensor-core versions (tile_gemv.cuh). Gate/up: tile p of slot s holds the
// gate rows of features 8p..8p+7 in its rows 0-7 and their up rows in rows
// 8-15 (to_tiles' pairs), so every tile finishes SwiGLU on its own. Rows
// depend on the routing, so copies wait for it. With kRoutes_ the job routes
// the token itself from the logits the previous GEMV fed (r.fed): every block
// reads them (thread e logit e) and picks the experts into shared memory
// before staging; block 0 writes them out for down with their weights, which
// need the staged RMSNorm factor; the last block zeroes the previous layer's
// feed (r.spent) for the next layer's producer.
template <bool kRoutes_>
struct UpJob {
  ExpertsUpArgs a;
  RouterArgs r;  // only when routing
  static constexpr bool kEarly = false, kRoutes = kRoutes_;
  static constexpr int kAlign = 1;
  static constexpr bool kNarrow = false;
  FastDiv slot_tiles = {};  // per_slot() (up_job sets it)
  __host__ __device__ int per_slot() const { return a.inter / 8; }
  __host__ __device__ int tiles() const { return (a.top_k + 1) * per_slot(); }
  __host__ __device__ int rounds() const { return a.gate_up.cols / tile::kRound; }
  __host__ __device__ int cols() const { return a.gate_up.cols; }
  // When routing, the staged input comes through shared memory: the norm
  // weights copied before the wait, h right after it beside the fed logits'
  // loads, so staging reads nothing from L2 behind the weight copies (+0.5%
  // at 4K; a prefetch into L1 instead lost 0.8%).
  __host__ __device__ size_t extra_floats(int) const { return kRoutes ? 2 * size_t(cols()) : 0; }
  static __device__ float* staged_in() {
    extern __shared__ float4 sm4[];
    return reinterpret_cast<float*>(sm4);
  }
  __device__ void before_wait(float*, int, int, tile::Cols) const {
    if constexpr (kRoutes) {
      cp_async_floats(staged_in() + cols(), r.norm, cols());
      cp_async_commit();
    }
  }
  static __device__ int* routed() {
    __shared__ int ids[kMaxTopK];
    return ids;
  }
  __device__ int expert(int slot) const {
    if constexpr (kRoutes) return slot < a.top_k ? routed()[slot] : a.n_experts;
    return slot_expert(a, slot);
  }
  __host__ __device__ tile::TileImage image() const { return tile::TileImage{cols()}; }
  // Tile p of an expert (gate rows 8p..8p+7, up rows 8p..8p+7: to_tiles' pairs).
  __host__ __device__ int pieces() const { return 1; }
  __device__ void copy(int t, int, uint8_t* st, uint64_t* bar) const {
    tile::copy_tile(a.gate_up, size_t(expert(slot_tiles.div(t))) * per_slot() + slot_tiles.mod(t),
                    st, bar);
  }
  __device__ tile::Staged stage(float* sm, float** red, tile::Cols mine) const {
    if constexpr (kRoutes) {
      cp_async_wait<0>();
      __syncthreads();
      const float* x = staged_in();
      return tile::stage<tile::Prep::norm>(x, cols(), {.norm = x + cols(), .eps = r.eps}, sm, red,
                                           mine);
    }
    return tile::stage<tile::Prep::plain>(a.a, cols(), {}, sm, red, mine);
  }
  // Thread e's fed logit (2^-32 fixed point, before the RMSNorm factor): the
  // sum of its copies. Its loads go out before h's copy, which is not needed
  // until after the routing.
  __device__ long long fetch() const {
    const int e = int(threadIdx.x);
    unsigned long long f[kFeedCopies] = {};
    if (e < r.W.rows)
#pragma unroll
      for (int c = 0; c < kFeedCopies; ++c) f[c] = __ldcg(r.fed + size_t(c) * r.W.rows + e);
    cp_async_floats(staged_in(), r.h, cols());
    cp_async_commit();
    unsigned long long v = 0;
#pragma unroll
    for (int c = 0; c < kFeedCopies; ++c) v += f[c];
    return static_cast<long long>(v);
  }
  // The fed logits (unscaled) and the choice, in shared memory.
  static __device__ float* logits() {
    __shared__ float p[tile::kThreads];
    return p;
  }
  static __device__ Choice* choice() {
    __shared__ Choice c[32];
    return c;
  }
  // Picks the experts before staging (their order does not depend on the
  // RMSNorm factor), in warp 0, which then issues the copies; the kernel's
  // barrier after them publishes the choice to the block.
  __device__ void route(long long fed) const {
    float* p = logits();
    p[threadIdx.x] = float(fed) * 0x1p-32f;
    __syncthreads();
    if (threadIdx.x < 32) {
      const int E = r.W.rows - 1;  // keys in registers for just the experts there are
      const Choice c = pick_routed(p, E, a.top_k);
      choice()[threadIdx.x] = c;
      if (int(threadIdx.x) < a.top_k) routed()[threadIdx.x] = c.id;
      __syncwarp();
    }
  }
  // After the first batch's barrier (norm: the RMSNorm factor): block 0 writes
  // the choice for down with the weights (scaled logits), and the last block
  // zeroes the previous layer's feed (no one reads it any more) for the next
  // layer's producer.
  __device__ void settle(float norm) const {
    if (blockIdx.x == 0 && threadIdx.x < 32)
      write_choice(r, choice()[threadIdx.x], logits()[r.W.rows - 1], norm);
    if (blockIdx.x == gridDim.x - 1)
      for (int i = int(threadIdx.x); i < kFeedCopies * r.W.rows; i += tile::kThreads)
        r.spent[i] = 0;
  }
  // Nothing into L2: down brings the next layer's weights in (cuda_backend).
  __device__ L2Ahead ahead() const {
    return {};
  }
  __device__ tile::NoPreload preload(int, int) const {
    return {};
  }
  // Thread i: feature i % 8 of the batch's tile i / 8.
  __device__ void finish(int b0, int, int t1, const tile::Sums& s, tile::NoPreload) const {
    const int i = int(threadIdx.x), t = b0 + i / 8, gate = i / 8 * 16 + i % 8;
    if (i >= s.stride / 2 || t >= t1) return;
    const int slot = slot_tiles.div(t), f = slot_tiles.mod(t) * 8 + i % 8;
    a.act[slot * a.inter + f] = siluf(s.row(gate)) * s.row(gate + 8);
  }
};

// Down: K runs over the slots (rounds of slot s read expert s's row), the
// staged activation is act times the routing weight of its slot, and the
// sums add into h.
struct DownJob {
  ExpertsDownArgs a;
  int per_expert = 0;       // 16-row tiles an expert (down_job sets it and the next)
  FastDiv per_weight = {};  // staged words (8 columns) a slot
  static constexpr bool kEarly = false, kRoutes = false;
  static constexpr int kAlign = 1;
  static constexpr bool kNarrow = true;  // between route_up and the next wide GEMV
  __host__ __device__ int hidden() const { return a.down.rows / (a.n_experts + 1); }
  __host__ __device__ int slot_rounds() const { return a.down.cols / tile::kRound; }
  __host__ __device__ int tiles() const { return per_expert; }
  __host__ __device__ int rounds() const { return (a.top_k + 1) * slot_rounds(); }
  __host__ __device__ int cols() const { return (a.top_k + 1) * a.down.cols; }
  __host__ __device__ size_t extra_floats(int) const { return 0; }
  __device__ void before_wait(float*, int, int, tile::Cols) const {}
  __host__ __device__ tile::TileImage image() const { return tile::TileImage{cols()}; }
  // Piece s: slot s's part of the image, tile t of its expert's rows.
  __host__ __device__ int pieces() const { return a.top_k + 1; }
  __device__ void copy(int t, int s, uint8_t* st, uint64_t* bar) const {
    const uint32_t slot_bytes = tile::TileImage{a.down.cols}.bytes();
    tile::copy_tile(a.down, size_t(slot_expert(a, s)) * per_expert + t, st + s * slot_bytes, bar);
  }
  __device__ tile::Staged stage(float* sm, float** red, tile::Cols mine) const {
    return tile::stage<tile::Prep::weighted>(
        a.act, cols(), {.weight = a.wts, .per_weight = per_weight}, sm, red, mine);
  }
  __device__ L2Ahead ahead() const { return a.ahead; }
  __device__ tile::NoPreload preload(int, int) const { return {}; }
  __device__ void finish(int b0, int, int t1, const tile::Sums& s, tile::NoPreload) const {
    const int i = int(threadIdx.x);
    if (i < 16 && b0 < t1) a.h[b0 * 16 + i] += s.row(i);
  }
};

DownJob down_job(const ExpertsDownArgs& a) {
  DownJob j{a};
  j.per_expert = j.hidden() / 16;
  j.per_weight = FastDiv(uint32_t(a.down.cols / 8));
  return j;
}

template <bool kRoutes>
UpJob<kRoutes> up_job(const ExpertsUpArgs& u, const RouterArgs& r) {
  UpJob<kRoutes> j{u, r};
  j.slot_tiles = FastDiv(uint32_t(u.inter / 8));
  return j;
}

int rows_per_block(int chunks) {
  int l = 1;
  while (l < 32 && 2 * l <= chunks) l *= 2;
  return kWarps * (32 / l);
}

cudaError_t router(const RouterArgs& a, cudaStream_t st) {
  if (a.W.bits != 8 || a.W.rows - 1 > kMaxExperts || a.top_k > kMaxTopK)
    return cudaErrorInvalidValue;
  const int rpb = rows_per_block(a.W.cols / Chunk<8>::kCodes);
  return launch_pdl(router_kernel, dim3((a.W.rows + rpb - 1) / rpb), dim3(kThreads),
                    stage_bytes<8>(a.W.cols), st, a);
}

}  // namespace

TERN_TRACE_BINDER(moe)

namespace {
// (Fewer than 2^16 tiles: FastDiv splits them by expert.)
bool up_tiled(const ExpertsUpArgs& u) {
  return u.gate_up.tiles != nullptr && up_tiles(u.gate_up, u.inter) &&
         (u.top_k + 1) * (u.inter / 8) < (1 << 16);
}

// Whether UpJob<true> can route r from fed logits for gate/up u.
bool fed_routable(const RouterArgs& r, const ExpertsUpArgs& u) {
  return r.W.bits == 8 && r.W.cols == u.gate_up.cols && r.W.rows <= tile::kThreads &&
         r.top_k <= kMaxTopK && up_tiled(u);
}

// Whether route_up takes r's fed logits in one launch (else r is invalid).
bool fed_launch(const RouterArgs& r, const ExpertsUpArgs& u) {
  return fed_routable(r, u) && r.spent != nullptr && r.spent != r.fed;
}

// Whether down takes a on tensor cores.
bool down_tiled(const ExpertsDownArgs& a) {
  const int D = a.down.rows / (a.n_experts + 1);
  return a.down.tiles != nullptr && down_tiles(a.down, D, a.top_k);
}

// The choice alone, for its test: one warp, the logits through shared memory
// as route_up and the router read them, picked as they pick (the router with
// 32 keys a lane).
__global__ void pick_kernel(const float* logits, int E, int top_k, int* ids) {
  __shared__ float p[kMaxExperts];
  for (int e = int(threadIdx.x); e < E; e += 32) p[e] = logits[e];
  __syncwarp();
  const Choice c =
      E <= tile::kThreads ? pick_routed(p, E, top_k) : pick_experts<kMaxExperts / 32>(p, E, top_k);
  if (int(threadIdx.x) < top_k) ids[threadIdx.x] = c.id;
}

}  // namespace

cudaError_t pick_top_k(const float* logits, int E, int top_k, int* ids, cudaStream_t st) {
  if (logits == nullptr || ids == nullptr || E < 1 || E > kMaxExperts || top_k < 1 ||
      top_k > std::min(E, 32))
    return cudaErrorInvalidValue;
  pick_kernel<<<1, 32, 0, st>>>(logits, E, top_k, ids);
  return cudaGetLastError();
}

// A round a warp; tiles of 8 gate and 8 up rows.
bool up_tiles(const DMat& gate_up, int inter) {
  return tileable(gate_up) && gate_up.cols / tile::kRound <= tile::kWarps && inter > 0 &&
         inter % 8 == 0 && gate_up.rows % (2 * inter) == 0;
}

// Up to 3 rounds a warp over the slots; whole 16-row tiles an expert.
bool down_tiles(const DMat& down, int hidden, int top_k) {
  return tileable(down) && (top_k + 1) * (down.cols / tile::kRound) <= 3 * tile::kWarps &&
         hidden % 16 == 0;
}

bool router_fed(const DMat& producer, const RouterArgs& r, const ExpertsUpArgs& u) {
  return gemv_feeds(producer) && r.W.cols == producer.rows && fed_routable(r, u);
}

cudaError_t route_experts_up(const RouterArgs& r, const ExpertsUpArgs& u, cudaStream_t st) {
  if (u.gate_up.bits != 4) return cudaErrorInvalidValue;
  if (r.fed != nullptr) {
    if (!fed_launch(r, u)) return cudaErrorInvalidValue;
    note_path(KernelPath::route_fed);
    note_path(KernelPath::up_tile);
    return tile::launch_batched<1>(up_job<true>(u, r), st);
  }
  note_path(KernelPath::route_unfed);
  if (cudaError_t e = router(r, st); e != cudaSuccess) return e;
  if (up_tiled(u)) {
    note_path(KernelPath::up_tile);
    return tile::launch<1, 3>(up_job<false>(u, {}), st);
  }
  if (u.gate_up.w == nullptr) return cudaErrorInvalidValue;
  note_path(KernelPath::up_simt);
  const int rpb = rows_per_block(u.gate_up.cols / Chunk<4>::kCodes);
  dim3 grid((u.inter + rpb - 1) / rpb, u.top_k + 1);
  return launch_pdl(experts_up_kernel, grid, dim3(kThreads), stage_bytes<4>(u.gate_up.cols), st, u);
}

cudaError_t route_experts_up_rows(const RouterArgs* r, const ExpertsUpArgs* u, int n,
                                  cudaStream_t st) {
  if (!rows_fit(n)) return cudaErrorInvalidValue;
  bool fed = true;
  for (int i = 0; i < n; ++i)
    fed = fed && r[i].fed != nullptr && u[i].gate_up.bits == 4 && fed_launch(r[i], u[i]) &&
          u[i].gate_up.tiles == u[0].gate_up.tiles;
  // Unfed (the small test shapes) a launch pair a row.
  if (!fed) {
    for (int i = 0; i < n; ++i)
      if (cudaError_t e = route_experts_up(r[i], u[i], st); e != cudaSuccess) return e;
    return cudaSuccess;
  }
  note_path(KernelPath::route_fed);
  note_path(KernelPath::up_tile);
  tile::EachRow<UpJob<true>> jobs;
  for (int i = 0; i < n; ++i) jobs.row[jobs.n++] = up_job<true>(u[i], r[i]);
  return tile::launch_batched<1>(jobs, st);
}

cudaError_t experts_down_rows(const ExpertsDownArgs* rows, int n, cudaStream_t st) {
  if (!rows_fit(n)) return cudaErrorInvalidValue;
  const ExpertsDownArgs& a = rows[0];
  if (a.down.bits != 4 || !down_tiled(a)) {
    for (int i = 0; i < n; ++i)
      if (cudaError_t e = experts_down(rows[i], st); e != cudaSuccess) return e;
    return cudaSuccess;
  }
  note_path(KernelPath::down_tile);
  tile::EachRow<DownJob> jobs;
  for (int i = 0; i < n; ++i) {
    const ExpertsDownArgs& r = rows[i];
    if (r.down.tiles != a.down.tiles || r.top_k != a.top_k) return cudaErrorInvalidValue;
    jobs.row[jobs.n++] = down_job(r);
  }
  return tile::launch<3, 1>(jobs, st);
}

cudaError_t experts_down(const ExpertsDownArgs& a, cudaStream_t st) {
  if (a.down.bits != 4) return cudaErrorInvalidValue;
  if (down_tiled(a)) {
    note_path(KernelPath::down_tile);
    return tile::launch<3, 1>(down_job(a), st);
  }
  if (a.down.w == nullptr) return cudaErrorInvalidValue;
  note_path(KernelPath::down_simt);
  const int D = a.down.rows / (a.n_experts + 1);
  const int rpb = rows_per_block(a.down.cols / Chunk<4>::kCodes);
  return launch_pdl(experts_down_kernel, dim3((D + rpb - 1) / rpb), dim3(kThreads),
                    stage_bytes<4>(a.down.cols * (a.top_k + 1)), st, a);
}

}  // namespace tern::cuda
