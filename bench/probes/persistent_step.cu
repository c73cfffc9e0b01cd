// What a persistent step kernel could reach (docs/kernels/cuda-decode.md,
// Tried and lost): one launch of
// one or two blocks an SM runs 40 Gated DeltaNet layers' memory schedule.
// Each block's producer warp streams the weights its consumers will need into
// a ring of shared memory, in the order they use them, as far ahead as the
// ring allows and across phase and layer boundaries; the consumer warps wait
// for each phase's input by a grid-wide counter (where the PDL chain waits
// for the previous launch) and publish their part by another.
//
// A layer's phases and bytes are the 35b-a3b decode step's, 4.5-bit weights
// in tiles of 18 KB (16 rows of 2048 codes and their scale|bias words):
//   in    14.2 MB  the in-projection (772 tiles), input the normed h
//   step   2+2 MB  the recurrent state, read through the ring and written back
//   out    4.7 MB  the out-projection; its blocks add partial router logits
//                  into 8 copies (as the engine's RouterFeed)
//   up    10.6 MB  gate/up of the shared expert and 8 routed experts: the
//                  consumers pick the experts from the fed logits, and only
//                  then does the producer copy the routed tiles
//   down   5.3 MB  the 9 experts' down rows (known once the pick is)
// The consumers' arithmetic is a stand-in: `touch` reads every 16 bytes of a
// tile once (about the issue of the engine's tensor-core tiles); `nib` dots
// each 4-bit code with the input on CUDA cores (more). What it measures is
// the schedule: µs a layer against the chain's ~25.5 at 4K and the floor.
// A case is "key=value ..." (Case below); the default list is the one
// bench/results/persistent-step-bf5dd1a.txt ran.
//
//   (-DTERN_PROBES=ON) cmake --build build --target persistent_step && build/persistent_step
//   [repeats [case ...]] (or nvcc -O3 -std=c++17 -arch=sm_90a -I src
//   bench/probes/persistent_step.cu)
#include <cuda_runtime.h>

#include "backends/cuda/common.cuh"
#include "backends/cuda/pick.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

namespace {

using tern::cuda::bulk_copy;
using tern::cuda::bulk_prefetch_l2;
using tern::cuda::global_ns;
using tern::cuda::mbar_arrive_expect;
using tern::cuda::mbar_init;
using tern::cuda::mbar_init_fence;
using tern::cuda::mbar_wait;
using tern::cuda::smem_addr;

constexpr int kLayers = 40, kPhases = 5, kConsumerWarps = 8, kThreads = 32 * (1 + kConsumerWarps),
              kConsumers = 32 * kConsumerWarps, kMaxSlots = 11, kPool = 2048, kRouted = 8,
              kVec = 4608, kMaxTiles = 800, kFeedCopies = 8;
constexpr uint32_t kTile = 18432, kStateTile = 16384;
enum Phase { in, step, out, up, down };
const char* const kPhaseNames[] = {"in", "step", "out", "up", "down"};
__host__ __device__ constexpr int tiles(int p) {
  constexpr int n[kPhases] = {772, 128, 256, 576, 288};
  return n[p];
}
constexpr size_t kUpBytes = 64ull * kTile, kDownBytes = 32ull * kTile;  // an expert's
constexpr size_t kInBytes = size_t(tiles(in)) * kTile, kOutBytes = size_t(tiles(out)) * kTile,
                 kStateBytes = size_t(tiles(step)) * kStateTile;

struct Weights {
  const uint8_t* in;         // [layer] kInBytes
  const uint8_t* out;        // [layer] kOutBytes
  uint8_t* state;            // [layer] kStateBytes
  const uint8_t* up_pool;    // [kPool + layer] kUpBytes (the last kLayers: shared experts)
  const uint8_t* down_pool;  // likewise kDownBytes
};

struct Args {
  Weights w;
  float* vec;          // [layer][phase] kVec: each phase's output, the next one's input
  float* logits;       // [layer][kFeedCopies] 256, the out phase's partial sums
  unsigned* counters;  // [layer][phase], blocks done (epoch * grid when all are)
  unsigned epoch;
  uint64_t* stamps;   // [block][layer][phase][2]: consumers past the wait, part published
  uint64_t* picked;   // [block][layer][2]: the producer waiting for the pick, past it
  uint64_t* ring_st;  // [block][kMaxTiles][4]: a tile's producer there, issued, landed, freed
                      // (warp 1)
  // The knobs (Case):
  int slots;         // ring depth
  bool deps;         // wait for counters (off: no grid-wide order at all)
  bool fence;        // the producer copies a phase's tiles only after its wait (a launch chain
                     // without early copies)
  int gate;          // the experts' tiles alone: nothing more goes out until this block's land
                     // (1: up, 2: up and down), or until every block's up (3) or down (4)
                     // phase is done
  bool burst;        // up to a ring's worth of tiles issued at once, a lane each (else lane 0
                     // issues one at a time)
  int ahead;         // tiles of the next layer's in-projection into L2 before the pick
  bool free;         // the producer does not wait for the pick (it copies the last layer's
                     // experts)
  bool contiguous;   // a block's tiles of a phase in one range (else every grid-th)
  bool touch;        // consumers read the tiles (else they free them at once)
  bool nib;          // consumers dot 4-bit codes (else touch)
  bool lean;         // consumers neither stage their input nor write anything
  bool bare;         // consumers only wait for each tile and free it (deps=0 free=1 only)
  bool nopick;       // the consumers skip the pick (free=1 only)
  int pub;           // how a phase's part is published (publish())
  bool hint;         // the copies evict-first from L2 (the engine's bulk_copy), else no hint
  bool ring_stamps;  // take them (four %globaltimer reads a tile)
};

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// A block's tiles of a phase: every g-th from b, or a contiguous range.
struct Share {
  int first, step, end;
  __host__ __device__ int count() const {
    return end > first ? (end - first + step - 1) / step : 0;
  }
};
__host__ __device__ inline Share share(const Args& a, int p, int b, int g) {
  if (a.contiguous) return {b * tiles(p) / g, 1, (b + 1) * tiles(p) / g};
  return {b, g, tiles(p)};
}

// The counter a phase waits for: the previous phase's (the previous layer's
// down for in), or none for the first.
__device__ __forceinline__ const unsigned* dependency(const Args& a, int layer, int p) {
  const int k = layer * kPhases + p - 1;
  return k < 0 ? nullptr : a.counters + k;
}
__device__ __forceinline__ void wait_counter(const Args& a, const unsigned* c) {
  if (c != nullptr && a.deps)
    while (ld_acquire(c) < a.epoch * gridDim.x) {
    }
}

// A block's part of a phase is done: the count goes up once its writes are
// visible (the consumers' barrier before ordered them), by a fence and an
// atomic (pub 0), a release atomic (1), or, for timing only, a relaxed atomic
// with no fence (2).
__device__ __forceinline__ void publish(const Args& a, unsigned* counter) {
  if (a.pub == 1) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    return;
  }
  if (a.pub == 0) __threadfence();
  atomicAdd(counter, 1u);
}

// The top 8 of 256 logits (in shared memory) by the engine's pick; the
// expert ids land in ids[] (the pool index for this layer). One warp.
__device__ void pick(const float* logits, int layer, int* ids) {
  const tern::cuda::Choice c = tern::cuda::pick_experts<8>(logits, 256, kRouted);
  const int lane = int(threadIdx.x) & 31;
  if (lane < kRouted) ids[lane] = (c.id + 256 * (layer % 8)) % kPool;
}

// Where tile t of phase p of a layer lies (ids: the routed experts).
__device__ __forceinline__ const uint8_t* tile_src(const Args& a, int layer, int p, int t,
                                                   const int* ids) {
  switch (p) {
    case in:
      return a.w.in + layer * kInBytes + size_t(t) * kTile;
    case step:
      return a.w.state + layer * kStateBytes + size_t(t) * kStateTile;
    case out:
      return a.w.out + layer * kOutBytes + size_t(t) * kTile;
    case up: {
      const int e = t / 64 == 0 ? kPool + layer : ids[t / 64 - 1];
      return a.w.up_pool + size_t(e) * kUpBytes + size_t(t % 64) * kTile;
    }
    default: {
      const int e = t / 32 == 0 ? kPool + layer : ids[t / 32 - 1];
      return a.w.down_pool + size_t(e) * kDownBytes + size_t(t % 32) * kTile;
    }
  }
}

__device__ void produce(const Args& a, uint8_t* ring, uint64_t* full, uint64_t* empty,
                        uint64_t* chosen, const int* ids) {
  const int lane = int(threadIdx.x) & 31, b = int(blockIdx.x), g = int(gridDim.x);
  // Tiles go out one at a time (lane 0), or in bursts of up to a ring's
  // worth, a lane each.
  const int group = a.burst ? min(a.slots, 32) : 1;
  int n = 0;  // the ring's count of tiles before this phase's
  for (int layer = 0; layer < kLayers; ++layer) {
    bool have = false;  // the routed experts, picked at the first tile that needs them
    for (int p = 0; p < kPhases; ++p) {
      const uint32_t bytes = p == step ? kStateTile : kTile;
      if (a.fence && lane == 0) wait_counter(a, dependency(a, layer, p));
      __syncwarp();
      const Share sh = share(a, p, b, g);
      const int count = sh.count();
      for (int i0 = 0; i0 < count; i0 += group) {
        const int i = i0 + lane, t = sh.first + i * sh.step, m = n + i;
        const bool mine = lane < group && i < count;
        if (!have && __any_sync(~0u, mine && ((p == up && t >= 64) || p == down))) {
          // The consumers pick the experts (from the fed logits, after the
          // out phase); before waiting for them, optionally the next layer's
          // first in-projection tiles into L2 (DRAM would idle meanwhile).
          if (lane == 0 && layer + 1 < kLayers)
            for (int k = 0, u = b; k < a.ahead && u < tiles(in); ++k, u += g)
              bulk_prefetch_l2(tile_src(a, layer + 1, in, u, ids), kTile);
          if (lane == 0) {
            uint64_t* pst = a.picked + (size_t(b) * kLayers + layer) * 2;
            pst[0] = global_ns();
            if (!a.free) mbar_wait(chosen, uint32_t(layer & 1));
            pst[1] = global_ns();
          }
          __syncwarp();
          have = true;
        }
        if (mine) {
          const int s = m % a.slots;
          uint64_t* st = a.ring_st + (size_t(b) * kMaxTiles + m) * 4;
          if (a.ring_stamps) st[0] = global_ns();
          if (m >= a.slots) mbar_wait(empty + s, uint32_t((m / a.slots - 1) & 1));
          mbar_arrive_expect(full + s, bytes);
          if (a.hint)
            bulk_copy(ring + size_t(s) * kTile, tile_src(a, layer, p, t, ids), bytes, full + s);
          else
            asm volatile(
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                "%2, [%3];" ::"r"(smem_addr(ring + size_t(s) * kTile)),
                "l"(tile_src(a, layer, p, t, ids)), "r"(bytes), "r"(smem_addr(full + s))
                : "memory");
          if (a.ring_stamps) st[1] = global_ns();
          // The experts' tiles alone: nothing more goes out until this
          // block's last up tile (gate 1; and its last down tile, gate 2)
          // has landed.
          if (i == count - 1 && ((a.gate >= 1 && p == up) || (a.gate >= 2 && p == down)))
            mbar_wait(full + s, uint32_t((m / a.slots) & 1));
        }
        __syncwarp();
      }
      n += count;
      // The whole grid's experts before anything of the next layer: after
      // its down tiles, the producer waits for every block's up phase (gate
      // 3) or down phase (gate 4) to be done.
      if (p == down && a.gate >= 3 && lane == 0)
        wait_counter(a, a.counters + layer * kPhases + (a.gate == 3 ? up : down));
      __syncwarp();
    }
  }
}

// A tile's stand-in arithmetic: 16 bytes at a time, each thread its own.
__device__ __forceinline__ float consume_tile(const uint8_t* tile, uint32_t bytes, const float* x,
                                              bool nib) {
  const int c = int(threadIdx.x) - 32;
  float acc = 0.f;
  for (int i = c; i < int(bytes / 16); i += kConsumers) {
    const uint4 q = reinterpret_cast<const uint4*>(tile)[i];
    if (!nib) {
      acc += float(q.x ^ q.y ^ q.z ^ q.w);
      continue;
    }
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    const float* xi = x + (i & 63);  // lanes on consecutive words (no bank conflicts)
    for (int w = 0; w < 4; ++w)
      for (int k = 0; k < 8; ++k)
        acc = fmaf(float((words[w] >> (4 * k)) & 15u), xi[w * 8 + k], acc);
  }
  return acc;
}

// len floats (a multiple of 4, at most kVec) from src into x, every load in
// flight before the first store (one L2 round trip).
__device__ __forceinline__ void stage(float* x, const float* src, int len) {
  constexpr int kPer = (kVec / 4 + kConsumers - 1) / kConsumers;
  const int c = int(threadIdx.x) - 32;
  float4 v[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k)
    if (c + k * kConsumers < len / 4)
      v[k] = __ldcg(reinterpret_cast<const float4*>(src) + c + k * kConsumers);
#pragma unroll
  for (int k = 0; k < kPer; ++k)
    if (c + k * kConsumers < len / 4) reinterpret_cast<float4*>(x)[c + k * kConsumers] = v[k];
}

__device__ void consume(const Args& a, uint8_t* ring, uint64_t* full, uint64_t* empty,
                        uint64_t* chosen, int* ids, float* x) {
  const int c = int(threadIdx.x) - 32, lane = c & 31, b = int(blockIdx.x), g = int(gridDim.x);
  int n = 0;
  if (a.bare) {  // every tile waited for and freed, nothing else
    int total = 0;
    for (int p = 0; p < kPhases; ++p) total += share(a, p, b, g).count();
    for (n = 0; n < total * kLayers; ++n) {
      mbar_wait(full + n % a.slots, uint32_t((n / a.slots) & 1));
      __syncwarp();
      if (lane == 0) mbar_arrive(empty + n % a.slots);
    }
    return;
  }
  for (int layer = 0; layer < kLayers; ++layer)
    for (int p = 0; p < kPhases; ++p) {
      if (c == 0) wait_counter(a, dependency(a, layer, p));
      consumers_sync();
      uint64_t* st = a.stamps + ((size_t(b) * kLayers + layer) * kPhases + p) * 2;
      if (c == 0) st[0] = global_ns();
      // The input: the previous phase's output vector (L2, written by other
      // blocks in this launch, hence .cg).
      const int prev = layer * kPhases + p - 1;
      const float* src = a.vec + size_t(prev < 0 ? 0 : prev) * kVec;
      const int len = p == down ? kVec : p == in || p == up ? 2048 : 4096;
      if (!a.lean) stage(x, src, len);
      if (p == up && !a.nopick) {
        // The fed logits (the sum of their copies; a per-layer hash spreads
        // the choice over the pool), the pick by warp 0, then the producer
        // may copy the experts.
        float* lg = x + 2048;
        const uint32_t h = (uint32_t(c) * 2654435761u) ^ (uint32_t(layer) * 40503u);
        float l = 0.f;
#pragma unroll
        for (int k = 0; k < kFeedCopies; ++k)
          l += __ldcg(a.logits + (layer * kFeedCopies + k) * 256 + c);
        lg[c] = l * 1e-30f + float(h & 0xffff);
        consumers_sync();
        if (c < 32) {
          pick(lg, layer, ids);
          __syncwarp();
          if (c == 0) mbar_arrive(chosen);
        }
      }
      consumers_sync();
      float* dst = a.vec + size_t(layer * kPhases + p) * kVec;
      float part = 0.f;
      const uint32_t bytes = p == step ? kStateTile : kTile;
      const Share sh = share(a, p, b, g);
      for (int t = sh.first; t < sh.end; t += sh.step, ++n) {
        const int s = n % a.slots;
        mbar_wait(full + s, uint32_t((n / a.slots) & 1));
        if (c == 0 && a.ring_stamps) a.ring_st[(size_t(b) * kMaxTiles + n) * 4 + 2] = global_ns();
        const uint8_t* tile = ring + size_t(s) * kTile;
        float acc = a.touch ? consume_tile(tile, bytes, x, a.nib) : 0.f;
        if (p == step && !a.lean)  // the state goes back, 16 bytes a thread at a time
          for (int i = c; i < int(bytes / 16); i += kConsumers)
            reinterpret_cast<uint4*>(a.w.state + layer * kStateBytes + size_t(t) * kStateTile)[i] =
                reinterpret_cast<const uint4*>(tile)[i];
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + s);
        if (c == 0 && a.ring_stamps) a.ring_st[(size_t(b) * kMaxTiles + n) * 4 + 3] = global_ns();
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(~0u, acc, o);
        if (lane == 0 && !a.lean) atomicAdd(dst + (t * kConsumerWarps + c / 32) % kVec, acc);
        part += acc;
      }
      // The out phase feeds the router: every block adds its part to the
      // 256 logits, in one of kFeedCopies copies (fewer atomics on a line).
      if (p == out && !a.lean)
        atomicAdd(a.logits + (layer * kFeedCopies + b % kFeedCopies) * 256 + c,
                  part * 1e-3f + float(c));
      consumers_sync();
      if (c == 0) {
        publish(a, a.counters + layer * kPhases + p);
        st[1] = global_ns();
      }
    }
}

__global__ void __launch_bounds__(kThreads, 2) persistent(Args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* ring = smem;
  float* x = reinterpret_cast<float*>(smem + size_t(a.slots) * kTile);
  uint64_t* full = reinterpret_cast<uint64_t*>(x + kVec);
  uint64_t* empty = full + kMaxSlots;
  __shared__ int ids[kRouted];
  __shared__ __align__(8) uint64_t chosen;  // the consumers have picked this layer's experts
  if (threadIdx.x == 0) {
    for (int s = 0; s < a.slots; ++s) {
      mbar_init(full + s);
      asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(smem_addr(empty + s)),
                   "n"(kConsumerWarps));
    }
    for (int r = 0; r < kRouted; ++r) ids[r] = r;  // before any pick (free=1)
    mbar_init(&chosen);
    mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x < 32)
    produce(a, ring, full, empty, &chosen, ids);
  else
    consume(a, ring, full, empty, &chosen, ids, x);
}

__global__ void fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n / 4;
       i += size_t(gridDim.x) * blockDim.x)
    reinterpret_cast<uint32_t*>(p)[i] = uint32_t(i * 2654435761u) ^ seed;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// A case: "key=value ..." over the Args knobs slots, deps, fence, gate,
// burst, ahead, free, contiguous, touch, nib, lean, bare, nopick, pub, hint,
// stamps (the ring's), and per_sm (blocks an SM: 1 or 2).
struct Case {
  std::string spec;
  int slots = 11, gate = 0, ahead = 0, per_sm = 1, deps = 1, fence = 0, burst = 0, contiguous = 0,
      touch = 1, nib = 0, free = 0, lean = 0, hint = 1, stamps = 1, bare = 0, nopick = 0, pub = 0;
  explicit Case(std::string s) : spec(std::move(s)) {
    using Field = int Case::*;
    struct Knob {
      const char* key;
      Field field;
      int lo, hi;
    };
    static constexpr Knob kKnobs[] = {{"slots", &Case::slots, 2, kMaxSlots},
                                      {"gate", &Case::gate, 0, 4},
                                      {"ahead", &Case::ahead, 0, 8},
                                      {"per_sm", &Case::per_sm, 1, 2},
                                      {"deps", &Case::deps, 0, 1},
                                      {"fence", &Case::fence, 0, 1},
                                      {"burst", &Case::burst, 0, 1},
                                      {"contiguous", &Case::contiguous, 0, 1},
                                      {"touch", &Case::touch, 0, 1},
                                      {"nib", &Case::nib, 0, 1},
                                      {"free", &Case::free, 0, 1},
                                      {"lean", &Case::lean, 0, 1},
                                      {"hint", &Case::hint, 0, 1},
                                      {"stamps", &Case::stamps, 0, 1},
                                      {"bare", &Case::bare, 0, 1},
                                      {"nopick", &Case::nopick, 0, 1},
                                      {"pub", &Case::pub, 0, 2}};
    for (size_t i = 0; i < spec.size();) {
      const size_t end = std::min(spec.find(' ', i), spec.size()), eq = spec.find('=', i);
      if (eq > end) fail("an item without '=' in", spec);
      const std::string key = spec.substr(i, eq - i), value = spec.substr(eq + 1, end - eq - 1);
      const Knob* k = std::find_if(std::begin(kKnobs), std::end(kKnobs),
                                   [&](const Knob& n) { return key == n.key; });
      if (k == std::end(kKnobs)) fail(("unknown key '" + key + "' in").c_str(), spec);
      char* rest = nullptr;
      const long v = std::strtol(value.c_str(), &rest, 10);
      if (value.empty() || *rest != '\0' || v < k->lo || v > k->hi)
        fail(("'" + key + "' takes an integer in [" + std::to_string(k->lo) + ", " +
              std::to_string(k->hi) + "] in")
                 .c_str(),
             spec);
      this->*k->field = int(v);
      i = end + 1;
    }
    // Waits nobody would end: bare consumers publish nothing and pick nothing.
    if (bare && (deps || !free)) fail("bare=1 needs deps=0 free=1 in", spec);
    if (nopick && !free) fail("nopick=1 needs free=1 in", spec);
  }
  static void fail(const char* what, const std::string& spec) {
    std::fprintf(stderr, "%s case '%s'\n", what, spec.c_str());
    std::exit(2);
  }
  void set(Args& a) const {
    a.slots = slots;
    a.deps = deps;
    a.fence = fence;
    a.gate = gate;
    a.burst = burst;
    a.ahead = ahead;
    a.contiguous = contiguous;
    a.touch = touch;
    a.nib = nib;
    a.free = free;
    a.lean = lean;
    a.hint = hint;
    a.ring_stamps = stamps;
    a.bare = bare;
    a.nopick = nopick;
    a.pub = pub;
  }
  size_t smem() const { return size_t(slots) * kTile + kVec * 4 + 2 * kMaxSlots * 8; }
};

template <typename T>
std::vector<T> fetch(const T* p, size_t n) {
  std::vector<T> v(n);
  check(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "copy back");
  return v;
}

// The ring in the last launch, means over blocks and tiles past the first
// layer: the producer's wait for a slot and issue, a tile's flight (issued to
// landed), its use (landed to freed by warp 1), and the producer's lag (a
// slot freed to the next copy into it issued); and the producer's wait for
// the pick.
void report_ring(const Args& a, int grid) {
  const std::vector<uint64_t> r = fetch(a.ring_st, size_t(grid) * kMaxTiles * 4),
                              pk = fetch(a.picked, size_t(grid) * kLayers * 2);
  double wait = 0, flight = 0, use = 0, lag = 0, pick = 0;
  size_t k = 0, kl = 0;
  for (int b = 0; b < grid; ++b) {
    int per_layer = 0;
    for (int p = 0; p < kPhases; ++p) per_layer += share(a, p, b, grid).count();
    for (int n = per_layer; n < per_layer * kLayers; ++n, ++k) {
      const uint64_t* t = r.data() + (size_t(b) * kMaxTiles + n) * 4;
      wait += double(t[1] - t[0]);
      flight += double(t[2] - t[1]);
      use += double(t[3] - t[2]);
      if (n >= a.slots) {
        lag += double(int64_t(t[1] - t[3 - 4 * a.slots]));
        ++kl;
      }
    }
    for (int layer = 1; layer < kLayers; ++layer) {
      const uint64_t* q = pk.data() + (size_t(b) * kLayers + layer) * 2;
      pick += double(q[1] - q[0]);
    }
  }
  std::printf(
      "  ring (us, means): the producer's wait and issue %.2f, flight %.2f, use %.2f, "
      "lag %.2f; its wait for the pick %.2f\n",
      wait / k * 1e-3, flight / k * 1e-3, use / k * 1e-3, lag / kl * 1e-3,
      pick / (grid * (kLayers - 1)) * 1e-3);
}

// The last launch's chain: per phase, when the last block got past its wait
// and when the last one published, from the previous phase's last publish,
// and when the last producer had the pick, from out's; means over layers
// 4..35.
void report_chain(const Args& a, int grid) {
  const std::vector<uint64_t> st = fetch(a.stamps, size_t(grid) * kLayers * kPhases * 2),
                              pk = fetch(a.picked, size_t(grid) * kLayers * 2);
  auto last = [&](int layer, int p, int which) {
    uint64_t m = 0;
    for (int b = 0; b < grid; ++b)
      m = std::max(m, st[((size_t(b) * kLayers + layer) * kPhases + p) * 2 + which]);
    return m;
  };
  double waited[kPhases] = {}, published[kPhases] = {}, pick = 0;
  constexpr int lo = 4, hi = 36;
  for (int layer = lo; layer < hi; ++layer) {
    for (int p = 0; p < kPhases; ++p) {
      const uint64_t from = p == 0 ? last(layer - 1, down, 1) : last(layer, p - 1, 1);
      waited[p] += double(last(layer, p, 0) - from) * 1e-3;
      published[p] += double(last(layer, p, 1) - from) * 1e-3;
    }
    uint64_t m = 0;
    for (int b = 0; b < grid; ++b) m = std::max(m, pk[(size_t(b) * kLayers + layer) * 2 + 1]);
    pick += double(m - last(layer, out, 1)) * 1e-3;
  }
  std::printf("  phase   last past its wait   last published (us from the previous phase's)\n");
  for (int p = 0; p < kPhases; ++p)
    std::printf("  %-6s %10.2f %20.2f\n", kPhaseNames[p], waited[p] / (hi - lo),
                published[p] / (hi - lo));
  std::printf("  the producers past the pick, last: %.2f us after out's publish\n",
              pick / (hi - lo));
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 5;
  if (repeats < 1 || repeats > 1000) {
    std::fprintf(stderr, "usage: persistent_step [repeats 1..1000 [case ...]]\n");
    return 2;
  }
  // The cases first: bad ones are refused before the GPU is touched.
  std::vector<Case> cases;
  for (int i = 2; i < argc; ++i) cases.emplace_back(argv[i]);
  if (cases.empty())
    for (const char* spec :
         {// the layers' copies alone, then with the consumers' per-phase work
          "deps=0 touch=0 free=1 bare=1", "deps=0 touch=0 free=1 bare=1 slots=5 per_sm=2",
          "deps=0 touch=0 free=1 lean=1", "deps=0 touch=0 free=1 lean=1 pub=2",
          "deps=0 touch=0 free=1 lean=1 nopick=1 pub=2", "deps=0 free=1", "deps=0",
          // the chain
          "deps=1", "deps=1 slots=6", "deps=1 slots=3", "deps=1 fence=1", "deps=1 gate=1",
          "deps=1 gate=3", "deps=1 burst=1", "deps=1 ahead=6", "deps=1 contiguous=1",
          "deps=1 pub=1", "deps=1 pub=2", "deps=1 slots=5 per_sm=2", "deps=1 slots=3 per_sm=2",
          "deps=1 slots=3 per_sm=2 gate=3", "deps=1 slots=5 per_sm=2 fence=1", "deps=1 nib=1",
          "deps=1 slots=3 per_sm=2 nib=1"})
      cases.emplace_back(spec);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  const size_t up_pool = (kPool + kLayers) * kUpBytes, down_pool = (kPool + kLayers) * kDownBytes;
  const size_t total = kLayers * (kInBytes + kOutBytes + kStateBytes) + up_pool + down_pool;
  uint8_t* mem = nullptr;
  check(cudaMalloc(&mem, total), "weights");
  fill<<<1024, 256>>>(mem, total, 0x9e3779b9u);
  Args a = {};
  a.w.in = mem;
  a.w.out = mem + kLayers * kInBytes;
  a.w.state = mem + kLayers * (kInBytes + kOutBytes);
  a.w.up_pool = a.w.state + kLayers * kStateBytes;
  a.w.down_pool = a.w.up_pool + up_pool;
  const size_t vec = sizeof(float) * kLayers * kPhases * kVec,
               logits = sizeof(float) * kLayers * kFeedCopies * 256,
               counters = sizeof(unsigned) * kLayers * kPhases;
  check(cudaMalloc(&a.vec, vec), "vec");
  check(cudaMemset(a.vec, 0, vec), "vec");
  check(cudaMalloc(&a.logits, logits), "logits");
  check(cudaMemset(a.logits, 0, logits), "logits");
  check(cudaMalloc(&a.counters, counters), "counters");
  check(cudaMalloc(&a.stamps, sizeof(uint64_t) * 2 * sms * kLayers * kPhases * 2), "stamps");
  check(cudaMalloc(&a.picked, sizeof(uint64_t) * 2 * sms * kLayers * 2), "picked");
  check(cudaMalloc(&a.ring_st, sizeof(uint64_t) * 2 * sms * kMaxTiles * 4), "ring stamps");
  check(cudaFuncSetAttribute(persistent, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared),
        "carveout");
  check(cudaFuncSetAttribute(persistent, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(Case("slots=11").smem())),
        "smem");
  // A layer's bytes: every tile once, and the state written back.
  double layer_bytes = double(kStateBytes);
  for (int p = 0; p < kPhases; ++p)
    layer_bytes += double(tiles(p)) * (p == step ? kStateTile : kTile);
  std::printf(
      "persistent step: %d SMs, blocks of %d threads, %d layers, %.1f MB a layer (floor "
      "at 4.24 TB/s: %.2f us), medians of %d launches\n",
      sms, kThreads, kLayers, layer_bytes / 1e6, layer_bytes / 4.24e12 * 1e6, repeats);
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  for (const Case& c : cases) {
    const int grid = sms * c.per_sm;
    c.set(a);
    // Every block must be resident at once (they wait for each other).
    int fit = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, persistent, kThreads, c.smem()),
          "fit");
    if (fit < c.per_sm) {
      std::printf("\n%-40s skipped: %d block(s) an SM fit\n", c.spec.c_str(), fit);
      continue;
    }
    // The counters reach epoch * grid: anew for every case (grids differ).
    check(cudaMemset(a.counters, 0, counters), "counters");
    a.epoch = 0;
    std::vector<float> us;
    for (int r = 0; r <= repeats; ++r) {  // the first is a warm-up
      ++a.epoch;
      check(cudaEventRecord(e0), "record");
      persistent<<<grid, kThreads, c.smem()>>>(a);
      check(cudaEventRecord(e1), "record");
      check(cudaEventSynchronize(e1), "run");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
      if (r > 0) us.push_back(ms * 1e3f);
    }
    std::sort(us.begin(), us.end());
    const double per_layer = us[us.size() / 2] / kLayers;
    std::printf("\n%-40s %8.2f us a layer (%.2f TB/s; min %.2f)\n", c.spec.c_str(), per_layer,
                layer_bytes / per_layer * 1e-6, us.front() / kLayers);
    if (c.stamps && !c.bare) report_ring(a, grid);
    if (c.deps) report_chain(a, grid);
  }
  return 0;
}
