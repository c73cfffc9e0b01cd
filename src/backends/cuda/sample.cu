// The sampler's token choice on the device, the twin of sample_token
// (backend/sampler.h) through the shared arithmetic of backend/sampling_rules.h.
// Nine launches of kBlocks x kThreads, each block on one contiguous chunk of
// the vocabulary, each launch finished by its last block (a self-resetting
// counter, so the captured graph replays):
//   prep          penalties, z = l / T, order keys of z, arg-max, and for a
//                 top_k of at most kBlocks the top_k-th largest of the
//                 blocks' best keys, a bound below the top-k set;
//   gather        with that bound, the few keys at or above it, and when
//                 they fit in one block, the whole choice from them;
//   count x3      radix select (11/11/10-bit digits) of the k-th largest key;
//   mass x3       radix select of the top-p threshold on fixed-point masses;
//   draw          kept mass per chunk, then the chosen chunk scanned in order.
// Launches whose feature is off or whose choice is made (top_k 0, top_p 1,
// temperature 0, gathered) return at once: with the chat defaults (top_k 40)
// two launches choose instead of eight. Integer sums make every result
// independent of the summation order.
#include <climits>

#include "backends/cuda/common.cuh"
#include "backends/cuda/rows.h"
#include "backends/cuda/sample.h"

namespace tern::cuda {

namespace {

using u64 = unsigned long long;
using namespace sampling;

constexpr int kThreads = 512, kBlocks = 128, kBins = 2048;
constexpr int kMaxGathered = kThreads;  // a thread a gathered key
static_assert(kBlocks <= kThreads && kBins % kThreads == 0);

// Digits of the radix select, from the top of the 32-bit key.
__host__ __device__ constexpr int digit_shift(int level) {
  return level == 0 ? 21 : level == 1 ? 10 : 0;
}
__host__ __device__ constexpr uint32_t digit_mask(int level) {
  return level == 2 ? 0x3ffu : 0x7ffu;
}

// What the launches of one choice hand to each other.
struct State {
  unsigned counter;  // blocks done in the current launch
  int sampling;      // 0: prep chose the token (temperature 0)
  int use_top_k, use_top_p;
  float z_max;
  uint32_t prefix;                // radix select: key bits fixed so far,
  u64 above;                      // and the weight of the keys above them
  uint32_t top_k_key, top_p_key;  // thresholds (0: none)
  u64 top_k_mass;
  uint32_t bound;     // gather: keys at or above it hold the top-k set (0: off)
  unsigned gathered;  // how many keys reached the bound
  uint32_t gathered_key[kMaxGathered];
  int gathered_idx[kMaxGathered];
  u64 hist[kBins];
  u64 part[kBlocks];
  uint32_t best_key[kBlocks];
  int best_idx[kBlocks];
};

__device__ __forceinline__ State& state(const SampleArgs& a) {
  return *static_cast<State*>(a.scratch);
}
__device__ __forceinline__ uint32_t* keys(const SampleArgs& a) {
  return reinterpret_cast<uint32_t*>(static_cast<char*>(a.scratch) + sizeof(State));
}

struct Chunk {
  int lo, hi;
};
__device__ __forceinline__ Chunk chunk(int block, int n) {
  const int c = (n + int(gridDim.x) - 1) / int(gridDim.x);
  const int lo = min(n, block * c);
  return {lo, min(n, lo + c)};
}

// Inclusive prefix sum in thread order; *total gets the block's sum.
__device__ u64 block_scan(u64 v, u64* total) {
  __shared__ u64 warp_total[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 y = __shfl_up_sync(kFull, v, o);
    if (lane >= o) v += y;
  }
  __syncthreads();
  if (lane == 31) warp_total[warp] = v;
  __syncthreads();
  u64 before = 0, all = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    before += w < warp ? warp_total[w] : 0;
    all += warp_total[w];
  }
  *total = all;
  return v + before;
}

__device__ __forceinline__ bool better(uint32_t k, int i, uint32_t k2, int i2) {
  return k2 > k || (k2 == k && i2 < i);
}

// Largest key, lowest index among equals; every thread gets it.
__device__ void block_best(uint32_t& k, int& i) {
  __shared__ uint32_t sk[kThreads / 32];
  __shared__ int si[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    const uint32_t k2 = __shfl_xor_sync(kFull, k, o);
    const int i2 = __shfl_xor_sync(kFull, i, o);
    if (better(k, i, k2, i2)) k = k2, i = i2;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sk[threadIdx.x >> 5] = k, si[threadIdx.x >> 5] = i;
  __syncthreads();
  k = sk[0], i = si[0];
  for (int w = 1; w < kThreads / 32; ++w)
    if (better(k, i, sk[w], si[w])) k = sk[w], i = si[w];
}

// The choice handed to the next step; the penalties count it from then on.
__device__ void choose(const SampleArgs& a, int token) {
  hand_off(a, token);
  a.counts[token] += 1;
}

// The k-th largest of the blocks' best keys (k <= the blocks), every thread
// of the last block: the best keys are distinct tokens', so at most the k-th
// largest key of all. 0 (no bound) where fewer than k blocks hold tokens.
__device__ uint32_t kth_best(const State& S, int k) {
  __shared__ uint32_t key[kBlocks];
  __shared__ uint32_t kth;
  const int b = int(threadIdx.x), B = int(gridDim.x);
  if (b < B) key[b] = __ldcg(&S.best_key[b]);
  if (b == 0) kth = 0;
  __syncthreads();
  if (b < B) {
    int ahead = 0;  // larger keys, and equal ones of lower blocks
    for (int j = 0; j < B; ++j) ahead += better(key[b], b, key[j], j);
    if (ahead == k - 1) kth = key[b];
  }
  __syncthreads();
  return kth;
}

template <typename P>
__global__ void __launch_bounds__(kThreads) prep_kernel(const __grid_constant__ P p) {
  const SampleArgs& a = args_of(p);
  pdl_launch_dependents();
  pdl_wait();
  State& S = state(a);
  const SampleRules r = *a.rules;
  uint32_t* key = keys(a);
  const Chunk c = chunk(blockIdx.x, a.n);
  uint32_t bk = 0;
  int bi = INT_MAX;
  for (int i = c.lo + threadIdx.x; i < c.hi; i += kThreads) {
    const uint32_t k = order_key(scaled_logit(a.logits[i], a.counts[i], r));
    key[i] = k;
    if (better(bk, bi, k, i)) bk = k, bi = i;
  }
  block_best(bk, bi);
  if (threadIdx.x == 0) S.best_key[blockIdx.x] = bk, S.best_idx[blockIdx.x] = bi;
  if (!last_block(&S.counter)) return;
  bk = 0, bi = INT_MAX;
  for (int b = threadIdx.x; b < int(gridDim.x); b += kThreads) {
    const uint32_t k2 = __ldcg(&S.best_key[b]);
    const int i2 = __ldcg(&S.best_idx[b]);
    if (better(bk, bi, k2, i2)) bk = k2, bi = i2;
  }
  block_best(bk, bi);
  const bool use_top_k = r.top_k > 0 && r.top_k < a.n;
  const bool gather = r.temperature > 0.0f && use_top_k && r.top_k <= int(gridDim.x);
  const uint32_t bound = gather ? kth_best(S, r.top_k) : 0u;
  if (threadIdx.x != 0) return;
  S.sampling = r.temperature > 0.0f;
  if (!S.sampling) {
    choose(a, bi);
    return;
  }
  S.z_max = key_value(bk);
  S.use_top_k = use_top_k;
  S.use_top_p = r.top_p < kMassOne;
  S.top_k_key = S.top_p_key = 0;
  S.bound = bound;
  S.gathered = 0;
}

// The bin, scanning down from the top, at which the running weight (from
// `above`) first reaches the goal, and the running weight above that bin;
// false if the total never reaches it. Zeroes the global histogram for the
// next launch.
template <typename Reaches>
__device__ bool select_bin(u64* hist, u64 above, Reaches reaches, int& bin, u64& bin_above) {
  constexpr int kPer = kBins / kThreads;
  __shared__ int s_bin;
  __shared__ u64 s_above;
  __shared__ bool s_found;
  if (threadIdx.x == 0) s_bin = 0, s_above = 0, s_found = false;
  u64 h[kPer], mine = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int b = kBins - 1 - (int(threadIdx.x) * kPer + j);
    h[j] = __ldcg(&hist[b]);
    hist[b] = 0;
    mine += h[j];
  }
  u64 total;
  u64 cum = above + block_scan(mine, &total) - mine;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const u64 next = cum + h[j];
    // Unique: the first bin with weight that reaches (all do when the goal is 0).
    if (h[j] > 0 && reaches(next) && (cum == 0 || !reaches(cum)))
      s_bin = kBins - 1 - (int(threadIdx.x) * kPer + j), s_above = cum, s_found = true;
    cum = next;
  }
  __syncthreads();
  bin = s_bin;
  bin_above = s_above;
  return s_found;
}

// One level of a radix select over the keys: the k-th largest key (kMass
// false, weight 1 per key) or the top-p key (kMass: weight = mass, over the
// top-k set without the tokens min-p drops).
template <bool kMass, int kLevel, typename P>
__global__ void __launch_bounds__(kThreads) radix_kernel(const __grid_constant__ P p) {
  const SampleArgs& a = args_of(p);
  pdl_launch_dependents();
  pdl_wait();
  State& S = state(a);
  if (!S.sampling || !(kMass ? S.use_top_p : S.use_top_k)) return;
  __shared__ u64 hist[kBins];
  constexpr int shift = digit_shift(kLevel);
  constexpr uint32_t fixed = kLevel == 0 ? 0u : ~0u << digit_shift(kLevel - 1);
  const SampleRules r = *a.rules;
  const uint32_t* key = keys(a);
  const uint32_t prefix = kLevel == 0 ? 0u : S.prefix;
  const uint32_t top_k_key = S.top_k_key;
  const float z_max = S.z_max;
  for (int b = threadIdx.x; b < kBins; b += kThreads) hist[b] = 0;
  __syncthreads();
  const Chunk c = chunk(blockIdx.x, a.n);
  u64 top_k_mass = 0;
  for (int i = c.lo + threadIdx.x; i < c.hi; i += kThreads) {
    const uint32_t k = key[i];
    if (kLevel > 0 && (k & fixed) != prefix) continue;
    if constexpr (kMass)
      if (k < top_k_key) continue;
    const u64 w = kMass ? mass(key_value(k), z_max) : 1;
    if (kMass && kLevel == 0) top_k_mass += w;
    if (w > 0 && (!kMass || w >= r.min_mass))
      atomicAdd(&hist[(k >> shift) & digit_mask(kLevel)], w);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += kThreads)
    if (hist[b] != 0) atomicAdd(&S.hist[b], hist[b]);
  if (kMass && kLevel == 0) {
    u64 block_mass;
    block_scan(top_k_mass, &block_mass);
    if (threadIdx.x == 0) S.part[blockIdx.x] = block_mass;
  }
  if (!last_block(&S.counter)) return;
  u64 goal = kMass ? S.top_k_mass : u64(r.top_k);
  if (kMass && kLevel == 0)
    block_scan(threadIdx.x < gridDim.x ? __ldcg(&S.part[threadIdx.x]) : 0, &goal);
  int bin;
  u64 bin_above;
  const bool found = select_bin(
      S.hist, kLevel == 0 ? 0 : S.above,
      [&](u64 cum) { return kMass ? reaches(cum, goal, r.top_p) : cum >= goal; }, bin, bin_above);
  if (threadIdx.x != 0) return;
  if (!found) {  // min-p left less than top_p of the mass: no top-p cut
    S.use_top_p = 0;
    return;
  }
  if (kMass && kLevel == 0) S.top_k_mass = goal;
  const uint32_t k = prefix | (uint32_t(bin) << shift);
  S.prefix = k;
  S.above = bin_above;
  if (kLevel == 2) (kMass ? S.top_p_key : S.top_k_key) = k;
}

// The choice from the n <= kMaxGathered gathered keys, which include the
// whole top-k set (one block, a key a thread): the top-k key by rank, the
// masses, the top-p key by a scan in key order, then the draw by each kept
// token's running mass in index order (as sample_token).
__device__ void choose_gathered(const SampleArgs& a, State& S, int n) {
  __shared__ uint32_t key[kMaxGathered], by_rank[kMaxGathered];
  __shared__ int idx[kMaxGathered];
  __shared__ u64 kept_by_rank[kMaxGathered], kept[kMaxGathered];
  __shared__ uint32_t top_k_key;
  __shared__ int first_top_p;
  __shared__ int token;
  const SampleRules r = *a.rules;
  const int t = int(threadIdx.x);
  const bool mine = t < n;
  const uint32_t k = mine ? __ldcg(&S.gathered_key[t]) : 0u;
  const int i = mine ? __ldcg(&S.gathered_idx[t]) : INT_MAX;
  key[t] = k, idx[t] = i;
  if (t == 0) first_top_p = INT_MAX;
  __syncthreads();
  // Rank by key, then index: a total order, so every rank is one key's.
  int rank = 0;
  if (mine)
    for (int j = 0; j < n; ++j) rank += better(k, i, key[j], idx[j]);
  if (mine && rank == r.top_k - 1) top_k_key = k;
  __syncthreads();
  const bool in_top_k = mine && k >= top_k_key;
  const u64 q = in_top_k ? mass(key_value(k), S.z_max) : 0;
  const u64 qk = q >= r.min_mass ? q : 0;  // min-p keeps it
  u64 top_k_mass;
  block_scan(q, &top_k_mass);
  // Top-p: the first key, scanning down, whose running kept mass reaches
  // top_p of the top-k set's.
  if (mine) by_rank[rank] = k, kept_by_rank[rank] = qk;
  __syncthreads();
  uint32_t top_p_key = 0;
  if (r.top_p < kMassOne) {
    const u64 w = t < n ? kept_by_rank[t] : 0;
    u64 all;
    const u64 cum = block_scan(w, &all);
    if (w > 0 && reaches(cum, top_k_mass, r.top_p)) atomicMin(&first_top_p, t);
    __syncthreads();
    if (first_top_p != INT_MAX) top_p_key = by_rank[first_top_p];
  }
  // The draw over what is kept, in index order.
  const u64 w = k >= top_p_key ? qk : 0;
  kept[t] = w;
  u64 total;
  block_scan(w, &total);  // its barriers publish kept[]
  const u64 target = draw_target(total, r.seed, uint64_t(*a.step));
  if (w > 0) {
    u64 before = 0;  // kept mass of lower indices
    for (int j = 0; j < n; ++j) before += idx[j] < i ? kept[j] : 0;
    if (before <= target && target < before + w) token = i;
  }
  __syncthreads();
  if (t != 0) return;
  S.sampling = 0;  // the later launches return at once
  choose(a, token);
}

// The keys at or above prep's bound (tokens in index order within a block,
// blocks in any order), then, when they fit, the choice from them.
template <typename P>
__global__ void __launch_bounds__(kThreads) gather_kernel(const __grid_constant__ P p) {
  const SampleArgs& a = args_of(p);
  pdl_launch_dependents();
  pdl_wait();
  State& S = state(a);
  if (!S.sampling || S.bound == 0) return;
  const uint32_t bound = S.bound;
  const uint32_t* key = keys(a);
  const Chunk c = chunk(blockIdx.x, a.n);
  for (int i = c.lo + threadIdx.x; i < c.hi; i += kThreads) {
    const uint32_t k = key[i];
    if (k < bound) continue;
    const unsigned at = atomicAdd(&S.gathered, 1u);
    if (at < kMaxGathered) S.gathered_key[at] = k, S.gathered_idx[at] = i;
  }
  if (!last_block(&S.counter)) return;
  const unsigned n = __ldcg(&S.gathered);
  if (n <= kMaxGathered) choose_gathered(a, S, int(n));
  // Otherwise (many ties at the bound) the radix selects choose.
}

template <typename P>
__global__ void __launch_bounds__(kThreads) draw_kernel(const __grid_constant__ P p) {
  const SampleArgs& a = args_of(p);
  pdl_launch_dependents();
  pdl_wait();
  State& S = state(a);
  if (!S.sampling) return;
  const SampleRules r = *a.rules;
  const uint32_t* key = keys(a);
  const uint32_t floor_key = max(S.top_k_key, S.top_p_key);
  const float z_max = S.z_max;
  auto weight = [&](int i) -> u64 {
    if (key[i] < floor_key) return 0;
    const u64 q = mass(key_value(key[i]), z_max);
    return q >= r.min_mass ? q : 0;
  };
  const Chunk c = chunk(blockIdx.x, a.n);
  u64 sum = 0;
  for (int i = c.lo + threadIdx.x; i < c.hi; i += kThreads) sum += weight(i);
  u64 block_total;
  block_scan(sum, &block_total);
  if (threadIdx.x == 0) S.part[blockIdx.x] = block_total;
  if (!last_block(&S.counter)) return;

  __shared__ int s_block, s_token;
  __shared__ u64 s_before;
  if (threadIdx.x == 0) s_block = 0, s_before = 0;  // always overwritten: target < total
  const u64 part = threadIdx.x < gridDim.x ? __ldcg(&S.part[threadIdx.x]) : 0;
  u64 total;
  const u64 upto = block_scan(part, &total);
  const u64 target = draw_target(total, r.seed, uint64_t(*a.step));
  if (part > 0 && upto > target && upto - part <= target)
    s_block = threadIdx.x, s_before = upto - part;
  __syncthreads();
  // The chosen chunk, a tile of kThreads tokens at a time, in index order.
  const Chunk cc = chunk(s_block, a.n);
  u64 run = s_before;
  if (threadIdx.x == 0) s_token = cc.lo;
  for (int base = cc.lo; base < cc.hi && run <= target; base += kThreads) {
    const int i = base + threadIdx.x;
    const u64 w = i < cc.hi ? weight(i) : 0;
    u64 tile;
    const u64 at = run + block_scan(w, &tile);
    if (w > 0 && at > target && at - w <= target) s_token = i;
    run += tile;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  choose(a, s_token);
}

__global__ void empty_kernel() {
  pdl_launch_dependents();
  pdl_wait();
}

}  // namespace

size_t sample_scratch_bytes(int n) {
  return sizeof(State) + size_t(n) * sizeof(uint32_t);
}

namespace {

// The sampler's kernels in order, each launched on grid.z rows of P.
template <typename P>
cudaError_t sample_launches(const P& p, unsigned rows, cudaStream_t st) {
  using Kernel = void (*)(P);
  constexpr Kernel kSteps[] = {prep_kernel<P>,
                               gather_kernel<P>,
                               radix_kernel<false, 0, P>,
                               radix_kernel<false, 1, P>,
                               radix_kernel<false, 2, P>,
                               radix_kernel<true, 0, P>,
                               radix_kernel<true, 1, P>,
                               radix_kernel<true, 2, P>,
                               draw_kernel<P>};
  for (Kernel k : kSteps)
    if (cudaError_t e = launch_pdl(k, dim3(kBlocks, 1, rows), dim3(kThreads), 0, st, p);
        e != cudaSuccess)
      return e;
  return cudaSuccess;
}

}  // namespace

cudaError_t sample_advance(const SampleArgs& a, cudaStream_t st) {
  if (a.n <= 0 || a.n > kMaxVocab) return cudaErrorInvalidValue;
  return sample_launches(a, 1, st);
}

cudaError_t sample_advance_rows(const SampleArgs* rows, int n, cudaStream_t st) {
  if (!rows_fit(n)) return cudaErrorInvalidValue;
  for (int i = 0; i < n; ++i)
    if (rows[i].n <= 0 || rows[i].n > kMaxVocab) return cudaErrorInvalidValue;
  return sample_launches(row_args(rows, n), unsigned(n), st);
}

cudaError_t empty_kernels(int n, cudaStream_t st) {
  for (int i = 0; i < n; ++i)
    if (cudaError_t e = launch_pdl(empty_kernel, dim3(kBlocks), dim3(128), 0, st); e != cudaSuccess)
      return e;
  return cudaSuccess;
}

}  // namespace tern::cuda
