// Streaming-read micro-benchmark at decode's kernel sizes: how long one kernel
// takes to read B bytes of weights with 132 blocks of 512 threads (the tile
// GEMV's shape), by access pattern, by where the bytes lie (one contiguous
// matrix, or 9 expert slices scattered over a 20 GB pool) and by when the
// loads go out (after the PDL wait, or before it). Each case is 40 launches
// on distinct bytes (nothing hits L2) in one CUDA graph, replayed; the time
// is per launch.
//
//   (-DTERN_PROBES=ON) cmake --build build --target membench && build/membench (or nvcc -O3
//   -std=c++17 -arch=sm_90a -I src bench/probes/membench.cu -o membench)
#include <cuda_runtime.h>

#include "backends/cuda/common.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace {

constexpr int kThreads = 512, kMaxLoads = 16, kPieces = 9, kLaunches = 40, kReplays = 20;
constexpr size_t kTile = 16 * 1024;  // 16 rows of 2048 4-bit codes

// bulk2: bulk copies into just the shared memory needed, so two blocks fit on
// an SM and the next launch's block copies while this one still runs.
// flat8 ("small7"): 7 blocks of 256 threads an SM (as many as fit), 16-byte
// loads: near KERNELS.md 1.3a's shape.
enum Mode { flat, tile, bulk, bulk2, flat8 };
const char* const kModeNames[] = {"flat", "tile", "bulk", "bulk2", "small7"};

// A launch's bytes: `pieces` slices of `piece` bytes each, read as one range.
struct Range {
  const uint8_t* base[kPieces];
  size_t piece;
  int pieces;
  __device__ const uint4* at(size_t off) const {
    return reinterpret_cast<const uint4*>(base[off / piece] + off % piece);
  }
  __host__ __device__ size_t bytes() const { return piece * pieces; }
};

__device__ __forceinline__ void wait_pdl() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void trigger_pdl() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// This block's share [lo, hi) of `units` equal units.
__device__ __forceinline__ void share(size_t units, size_t& lo, size_t& hi) {
  lo = blockIdx.x * units / gridDim.x;
  hi = (blockIdx.x + 1) * units / gridDim.x;
}

// The tile GEMV's loads of this block's tiles into v[0..n): warp w, lane
// (g, t) takes 16 bytes at 64 w + 16 t of rows g and g + 8 of each 16-row
// tile (rows of 1 KB).
template <int N>
__device__ __forceinline__ int tile_loads(const Range& r, uint4 (&v)[N]) {
  size_t lo, hi;
  share(r.bytes() / kTile, lo, hi);
  const int w = int(threadIdx.x / 32), g = int(threadIdx.x % 32 / 4), t = int(threadIdx.x % 4);
  int n = 0;
#pragma unroll
  for (int i = 0; i < N / 2; ++i)
    if (lo + i < hi) {
      const size_t o = (lo + i) * kTile + 64 * w + 16 * t;
      v[2 * i] = __ldcs(r.at(o + 1024 * g));
      v[2 * i + 1] = __ldcs(r.at(o + 1024 * (g + 8)));
      n = 2 * i + 2;
    }
  return n;
}

template <Mode M>
__global__ void __launch_bounds__(kThreads, M == bulk2 ? 2 : 1)
    read_kernel(const __grid_constant__ Range r, bool early, unsigned* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  trigger_pdl();
  if (!early) wait_pdl();
  uint32_t x = 0;
  if constexpr (M == bulk || M == bulk2) {
    // One thread copies the block's bytes into shared memory in 16 KB bulk
    // copies completing on one mbarrier.
    __shared__ __align__(8) uint64_t bar;
    size_t lo, hi;
    share(r.bytes() / 4096, lo, hi);
    lo *= 4096, hi *= 4096;
    const uint32_t b = uint32_t(__cvta_generic_to_shared(&bar));
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(b));
      asm volatile("fence.mbarrier_init.release.cluster;");
      asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(b),
                   "r"(uint32_t(hi - lo)));
      for (size_t o = lo; o < hi;) {
        const size_t n = min(min(size_t(16384), hi - o), r.piece - o % r.piece);
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
            "[%3];" ::"r"(uint32_t(__cvta_generic_to_shared(smem + (o - lo)))),
            "l"(r.at(o)), "r"(uint32_t(n)), "r"(b)
            : "memory");
        o += n;
      }
    }
    __syncthreads();
    if (early) wait_pdl();
    uint32_t done = 0;
    while (!done)
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(b)
          : "memory");
    // Every byte read back once, as a GEMV would.
    const uint4* s4 = reinterpret_cast<const uint4*>(smem);
    for (size_t i = threadIdx.x; i < (hi - lo) / 16; i += kThreads) x ^= s4[i].x ^ s4[i].w;
  } else {
    constexpr int kLoads = M == flat8 ? 4 : kMaxLoads;
    uint4 v[kLoads];
    int n = 0;
    if constexpr (M == flat || M == flat8) {
      // Thread i: 16 bytes at i of each unit of blockDim x 16 bytes (512 bytes
      // a warp instruction).
      size_t lo, hi;
      share(r.bytes() / (blockDim.x * 16), lo, hi);
#pragma unroll
      for (int i = 0; i < kLoads; ++i)
        if (lo + i < hi) v[i] = __ldcs(r.at(((lo + i) * blockDim.x + threadIdx.x) * 16)), n = i + 1;
    } else {
      n = tile_loads(r, v);
    }
    if (early) wait_pdl();
#pragma unroll
    for (int i = 0; i < kLoads; ++i)
      if (i < n) x ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  }
  if (x == 0x9e3779b9u) atomicAdd(sink, 1u);
}

using tern::cuda::global_ns;

// Whether a load issued after the weights' returns before them: the tile
// loads go out, then one word of a small L2-resident buffer; thread 0 of each
// block records when that word and when all the weights had arrived.
__global__ void __launch_bounds__(kThreads, 1)
    probe_kernel(const __grid_constant__ Range r, const uint32_t* hot, uint32_t* ns,
                 unsigned* sink) {
  const uint64_t t0 = global_ns();
  uint4 v[kMaxLoads];
  const int n = tile_loads(r, v);
  uint32_t x = __ldcg(hot + threadIdx.x);
  asm volatile("" ::"r"(x));
  const uint64_t t1 = global_ns();
#pragma unroll
  for (int i = 0; i < kMaxLoads; ++i)
    if (i < n) x ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  asm volatile("" ::"r"(x));
  const uint64_t t2 = global_ns();
  if (threadIdx.x == 0)
    ns[2 * blockIdx.x] = uint32_t(t1 - t0), ns[2 * blockIdx.x + 1] = uint32_t(t2 - t0);
  if (x == 0x9e3779b9u) atomicAdd(sink, 1u);
}

// Shared memory for a block's share of r (bulk modes).
size_t smem_bytes(Mode m, const Range& r) {
  if (m == bulk) return 120 * 1024;
  if (m == bulk2) return (r.bytes() / 4096 + 131) / 132 * 4096;
  return 0;
}

template <Mode M>
void launch(const Range& r, bool early, unsigned* sink, cudaStream_t st) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(M == flat8 ? 132 * 7 : 132);
  cfg.blockDim = dim3(M == flat8 ? kThreads / 2 : kThreads);
  cfg.dynamicSmemBytes = smem_bytes(M, r);
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, read_kernel<M>, r, early, sink);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// µs per launch of kLaunches launches over `ranges`.
float time_case(Mode m, const std::vector<Range>& ranges, bool early, unsigned* sink,
                cudaStream_t st) {
  cudaGraph_t g;
  check(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), "capture");
  for (const Range& r : ranges) {
    if (m == flat) launch<flat>(r, early, sink, st);
    if (m == tile) launch<tile>(r, early, sink, st);
    if (m == bulk) launch<bulk>(r, early, sink, st);
    if (m == bulk2) launch<bulk2>(r, early, sink, st);
    if (m == flat8) launch<flat8>(r, early, sink, st);
  }
  check(cudaStreamEndCapture(st, &g), "end capture");
  cudaGraphExec_t ex;
  check(cudaGraphInstantiate(&ex, g, 0), "instantiate");
  check(cudaGraphLaunch(ex, st), "warm-up");
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  cudaEventRecord(a, st);
  for (int i = 0; i < kReplays; ++i) cudaGraphLaunch(ex, st);
  cudaEventRecord(b, st);
  check(cudaEventSynchronize(b), "replay");
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaGraphExecDestroy(ex), cudaGraphDestroy(g);
  return ms * 1000.0f / (kReplays * kLaunches);
}

}  // namespace

int main() {
  constexpr size_t kPool = size_t(20) << 30;
  uint8_t* pool = nullptr;
  unsigned* sink = nullptr;
  check(cudaMalloc(&pool, kPool), "pool");
  check(cudaMalloc(&sink, sizeof(unsigned)), "sink");
  check(cudaMemset(pool, 0x5a, kPool), "fill");
  for (auto k : {read_kernel<bulk>, read_kernel<bulk2>})
    check(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024), "smem");
  cudaStream_t st;
  cudaStreamCreate(&st);
  std::mt19937_64 rng(1);
  struct Case {
    const char* what;
    size_t piece;
    int pieces;
    bool scattered;
  };
  // Bytes per kernel: out_proj 4.72 MB, experts gate/up 10.6 MB (9 x 1.18),
  // experts down 5.3 MB (9 x 0.59), GDN in-projection 14.2 MB.
  const Case cases[] = {
      {"dense 4.7MB", 288 * kTile, 1, false},        {"dense 10.6MB", 648 * kTile, 1, false},
      {"dense 14.2MB", 868 * kTile, 1, false},       {"9 x 1.18MB adjacent", 72 * kTile, 9, false},
      {"9 x 1.18MB scattered", 72 * kTile, 9, true}, {"9 x 0.59MB scattered", 36 * kTile, 9, true}};
  std::printf("%-22s %-6s %-12s %8s %8s\n", "bytes", "loads", "issued", "us", "TB/s");
  for (const Case& c : cases) {
    std::vector<Range> ranges(kLaunches);
    size_t next = 0;
    for (Range& r : ranges) {
      r.piece = c.piece, r.pieces = c.pieces;
      for (int p = 0; p < c.pieces; ++p) {
        if (c.scattered) {
          // 256 expert slots of this size in each 2 GB "layer", a random one.
          const size_t layer = (next++ % 10) * (size_t(2) << 30);
          r.base[p] = pool + layer + (rng() % 256) * c.piece;
        } else {
          r.base[p] = pool + next, next += c.piece;
        }
      }
    }
    for (Mode m : {flat, tile, bulk, bulk2, flat8})
      for (bool early : {false, true}) {
        const float us = time_case(m, ranges, early, sink, st);
        std::printf("%-22s %-6s %-12s %8.2f %8.2f\n", c.what, kModeNames[m],
                    early ? "before wait" : "after wait", us, c.piece * c.pieces / us * 1e-6);
      }
  }
  // The probe, on a matrix no earlier launch touched.
  Range r{};
  r.piece = 648 * kTile, r.pieces = 1, r.base[0] = pool + (size_t(19) << 30);
  uint32_t *hot = nullptr, *ns = nullptr;
  check(cudaMalloc(&hot, kThreads * 4), "hot");
  check(cudaMalloc(&ns, 2 * 132 * 4), "ns");
  check(cudaMemset(hot, 1, kThreads * 4), "hot");
  probe_kernel<<<132, kThreads>>>(r, hot, ns, sink);
  std::vector<uint32_t> h(2 * 132);
  check(cudaMemcpy(h.data(), ns, h.size() * 4, cudaMemcpyDeviceToHost), "probe");
  std::vector<uint32_t> a, b;
  for (int i = 0; i < 132; ++i) a.push_back(h[2 * i]), b.push_back(h[2 * i + 1]);
  std::sort(a.begin(), a.end()), std::sort(b.begin(), b.end());
  std::printf(
      "probe (10.6 MB, tile loads then one L2 word): word back after %u ns (median block), "
      "weights after %u ns\n",
      a[66], b[66]);
  return 0;
}
