// How the decode GEMV's time grows with the rows it serves (issue 44's graph
// over R rows, docs/kernels/cuda-decode.md "Several sequences a step"): the
// tile GEMV's ring of bulk copies and its per-round arithmetic (tile_mma.cuh:
// stage, fragment, round_dot: 4 mma.sync m16n8k32 a row a round) with each
// tile read once and dotted with R = 1, 2, 4, 8, 16 staged activations, on
// matrices of 2048 columns of 4-bit codes in the tile layout, taken in turn so
// that the bytes come from DRAM (75 or 151 MB, past the 50-60 MB L2): 8192 rows
// (a per-layer GEMV's size: 3-4 tiles a block, one batch) and 65536 (a long
// run through the ring, as the output head's). A warp takes one
// round (128 columns) of every tile; the fragments stay in registers up to 4
// rows and are read again from shared memory a tile beyond. Reported per R:
// µs a matrix, GB/s of tile bytes, and each row's outputs against the same row
// alone (R = 1), bit for bit: the rows never meet, as the design says.
//
//   (-DTERN_PROBES=ON) cmake --build build --target rows_gemv && build/rows_gemv
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cuda/tile_mma.cuh"

namespace {

using namespace tern::cuda;

constexpr int kK = 2048, kRounds = kK / tile::kRound, kMaxR = 16, kLaunches = 40;
constexpr size_t kSetBytes = size_t(151) << 20;  // the matrices taken in turn
constexpr uint32_t kTileBytes = uint32_t(kRounds) * kTileRoundBytes;
constexpr size_t kStagedBytes = (tile::stage_bytes(kK, 0) + 127) / 128 * 128;

#define CHECK(x)                                                                       \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

template <int R>
__host__ __device__ constexpr int
batch() {  // tiles a batch: the reduction space fits beside 16 rows' staging
  return R >= 16 ? 2 : 3;
}

// Row r's staged view: stage() laid out the same way at its own base.
__device__ __forceinline__ tile::Staged at_row(const tile::Staged& s0, int r) {
  const size_t off = size_t(r) * kStagedBytes;
  auto move = [&](const auto* p) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(p)>>;
    return reinterpret_cast<const T*>(reinterpret_cast<const uint8_t*>(p) + off);
  };
  return {move(s0.part), move(s0.xsum), move(s0.scale), s0.K, nullptr, 0.0f};
}

template <int R>
__global__ void __launch_bounds__(tile::kThreads, 1)
    rows_gemv(const uint8_t* tiles, int n_tiles, const float* x, float* y, int stages) {
  constexpr int TB = batch<R>();
  extern __shared__ __align__(128) uint8_t sm[];
  uint8_t* ring = sm;
  uint64_t* bars = reinterpret_cast<uint64_t*>(ring + size_t(stages) * kTileBytes);
  float* red = reinterpret_cast<float*>(bars + tile::kWarps);  // [warp][TB][R][16]
  uint8_t* staging = reinterpret_cast<uint8_t*>(red + tile::kWarps * TB * R * 16);
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31), g = lane >> 2;
  const int t0 = int(unsigned(blockIdx.x) * unsigned(n_tiles) / gridDim.x),
            t1 = int(unsigned(blockIdx.x + 1) * unsigned(n_tiles) / gridDim.x);
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) mbar_init(bars + i);
    mbar_init_fence();
  }
  __syncthreads();
  auto issue = [&](int t) {
    const int slot = (t - t0) % stages;
    mbar_arrive_expect(bars + slot, kTileBytes);
    bulk_copy(ring + size_t(slot) * kTileBytes, tiles + size_t(t) * kTileBytes, kTileBytes,
              bars + slot);
  };
  if (threadIdx.x == 0)
    for (int t = t0; t < min(t1, t0 + stages); ++t) issue(t);
  const tile::Cols mine = tile::warp_cols<1>(kRounds);
  float* unused = nullptr;
  tile::Staged xs0{};
  for (int r = 0; r < R; ++r) {
    const tile::Staged s = tile::stage<tile::Prep::plain>(
        x + r * kK, kK, {}, reinterpret_cast<float*>(staging + r * kStagedBytes), &unused, mine);
    if (r == 0) xs0 = s;
  }
  constexpr int kCached = R <= 4 ? R : 1;
  tile::Fragment fc[kCached];
  if constexpr (R <= 4)
    for (int r = 0; r < R; ++r) fc[r] = tile::fragment(at_row(xs0, r), 4 * warp);
  const tile::TileImage img{kK};
  int slot0 = 0;
  uint32_t phase0 = 0;
  for (int b0 = t0; b0 < t1; b0 += TB) {
    float acc[TB][R][2] = {};
#pragma unroll
    for (int tt = 0; tt < TB; ++tt)
      if (b0 + tt < t1) {
        int slot = slot0 + tt;
        uint32_t parity = phase0;
        if (slot >= stages) slot -= stages, parity ^= 1u;
        mbar_wait(bars + slot, parity);
        const tile::Load l = img.read(ring + size_t(slot) * kTileBytes, warp);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if constexpr (R <= 4) {
            tile::round_dot(l, fc[r], acc[tt][r][0], acc[tt][r][1]);
          } else {
            const tile::Fragment f = tile::fragment(at_row(xs0, r), 4 * warp);
            tile::round_dot(l, f, acc[tt][r][0], acc[tt][r][1]);
          }
        }
      }
#pragma unroll
    for (int tt = 0; tt < TB; ++tt)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float v0 = tile::quad_sum(acc[tt][r][0]), v8 = tile::quad_sum(acc[tt][r][1]);
        if ((lane & 3) == 0) {
          red[((warp * TB + tt) * R + r) * 16 + g] = v0;
          red[((warp * TB + tt) * R + r) * 16 + g + 8] = v8;
        }
      }
    __syncthreads();
    if (threadIdx.x == 0)  // every warp is past the batch's stages: refill them
      for (int tt = 0; tt < TB && b0 + tt + stages < t1; ++tt) issue(b0 + tt + stages);
    for (int i = int(threadIdx.x); i < TB * R * 16; i += tile::kThreads) {
      const int tt = i / (R * 16), r = i / 16 % R, row = i % 16;
      if (b0 + tt < t1)  // the warps' partials in warp order, as alone
        y[size_t(r) * n_tiles * 16 + size_t(b0 + tt) * 16 + row] =
            tile::warps_sum(red + (tt * R + r) * 16 + row, TB * R * 16, tile::kWarps);
    }
    __syncthreads();
    slot0 += TB;
    if (slot0 >= stages) slot0 -= stages, phase0 ^= 1u;
  }
}

// Random codes; each round's scale|bias words bf16 pairs near 0.01.
__global__ void fill(uint8_t* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n / 4;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const bool sb = (i * 4) % kTileRoundBytes >= 1024;
    reinterpret_cast<uint32_t*>(p)[i] =
        sb ? (0x3C000000u | (h & 0x00FF0000u) | 0x3C00u | (h & 0xFFu)) : h;
  }
}

// Shared memory of rows_gemv<R> with as many ring stages as fit (up to 16).
template <int R>
size_t smem_of(size_t free, int& stages) {
  const size_t fixed = sizeof(uint64_t) * tile::kWarps +
                       sizeof(float) * tile::kWarps * batch<R>() * R * 16 +
                       size_t(R) * kStagedBytes;
  stages = int(std::min<size_t>(16, (free - fixed) / kTileBytes));
  return fixed + size_t(stages) * kTileBytes;
}

struct Shape {
  int rows, mats;
  int tiles() const { return rows / 16; }
  size_t bytes() const { return size_t(tiles()) * kTileBytes; }
  const uint8_t* mat(const uint8_t* set, int i) const { return set + size_t(i % mats) * bytes(); }
};

// Times R rows a launch over the shape's matrices in turn; checks each row's
// outputs on the last one against `alone`. Returns the µs a matrix, or -1.
template <int R>
double run(const Shape& sh, const uint8_t* set, const float* x, float* y, int blocks, size_t free,
           const std::vector<float>& alone, double copy_gbs, double base_us) {
  int stages = 0;
  const size_t smem = smem_of<R>(free, stages);
  if (cudaFuncSetAttribute(rows_gemv<R>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) !=
      cudaSuccess)
    return -1;
  for (int m = 0; m < sh.mats; ++m)  // warm-up
    rows_gemv<R><<<blocks, tile::kThreads, smem>>>(sh.mat(set, m), sh.tiles(), x, y, stages);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < kLaunches; ++i)
    rows_gemv<R><<<blocks, tile::kThreads, smem>>>(sh.mat(set, i), sh.tiles(), x, y, stages);
  cudaEventRecord(b);
  if (cudaEventSynchronize(b) != cudaSuccess) return -1;
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  const double us = 1e3 * ms / kLaunches, gbs = double(sh.bytes()) / (us * 1e3);
  std::vector<float> out(size_t(R) * sh.rows);
  if (cudaMemcpy(out.data(), y, out.size() * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)
    return -1;
  const bool same = std::memcmp(out.data(), alone.data(), out.size() * sizeof(float)) == 0;
  std::printf(
      "  R %2d: %2d stages, %8.2f us a matrix (%5.2fx one row's), %5.0f GB/s (%4.1f%% of "
      "copy), each row bit-equal to it alone: %s\n",
      R, stages, us, base_us > 0 ? us / base_us : 1.0, gbs, 100.0 * gbs / copy_gbs,
      same ? "yes" : "NO");
  return same ? us : -1;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "no GPU\n");
    return 1;
  }
  uint8_t* set = nullptr;
  float *x = nullptr, *y = nullptr;
  CHECK(cudaMalloc(&set, kSetBytes));
  CHECK(cudaMalloc(&x, sizeof(float) * kMaxR * kK));
  CHECK(cudaMalloc(&y, sizeof(float) * kMaxR * 65536));
  fill<<<1024, 256>>>(set, kSetBytes);
  std::vector<float> hx(size_t(kMaxR) * kK);
  uint32_t s = 12345;
  for (float& v : hx) {
    s = s * 1664525u + 1013904223u;
    v = float(int(s >> 9) - (1 << 22)) / float(1 << 22);  // uniform in [-1, 1)
  }
  CHECK(cudaMemcpy(x, hx.data(), sizeof(float) * hx.size(), cudaMemcpyHostToDevice));
  // Copy bandwidth (read + write) over the set, for the floor.
  uint8_t* dst = nullptr;
  CHECK(cudaMalloc(&dst, kSetBytes));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaMemcpy(dst, set, kSetBytes, cudaMemcpyDeviceToDevice));
  CHECK(cudaEventRecord(a));
  for (int i = 0; i < 10; ++i) CHECK(cudaMemcpy(dst, set, kSetBytes, cudaMemcpyDeviceToDevice));
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  const double copy_gbs = 2.0 * double(kSetBytes) * 10 / (ms * 1e6);
  CHECK(cudaFree(dst));
  const int blocks = prop.multiProcessorCount;
  const size_t free = prop.sharedMemPerBlockOptin;
  std::printf("%s, %d SMs, copy %.0f GB/s (read + write)\n", prop.name, blocks, copy_gbs);
  int bad = 0;
  for (const Shape sh : {Shape{8192, 8}, Shape{65536, 2}}) {
    std::printf("%d matrices of %d x %d (%.1f MB each) in turn, %d tiles a block\n", sh.mats,
                sh.rows, kK, double(sh.bytes()) / 1e6, (sh.tiles() + blocks - 1) / blocks);
    // Each row alone (R = 1 on that row's activation) on the matrix the timed
    // runs end on.
    std::vector<float> alone(size_t(kMaxR) * sh.rows);
    int stages = 0;
    const size_t smem = smem_of<1>(free, stages);
    CHECK(
        cudaFuncSetAttribute(rows_gemv<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    for (int r = 0; r < kMaxR; ++r) {
      rows_gemv<1><<<blocks, tile::kThreads, smem>>>(sh.mat(set, kLaunches - 1), sh.tiles(),
                                                     x + r * kK, y, stages);
      CHECK(cudaMemcpy(alone.data() + size_t(r) * sh.rows, y, sizeof(float) * sh.rows,
                       cudaMemcpyDeviceToHost));
    }
    const double one = run<1>(sh, set, x, y, blocks, free, alone, copy_gbs, 0);
    const double t[] = {one, run<2>(sh, set, x, y, blocks, free, alone, copy_gbs, one),
                        run<4>(sh, set, x, y, blocks, free, alone, copy_gbs, one),
                        run<8>(sh, set, x, y, blocks, free, alone, copy_gbs, one),
                        run<16>(sh, set, x, y, blocks, free, alone, copy_gbs, one)};
    for (double v : t) bad += v < 0;
  }
  return bad;
}
