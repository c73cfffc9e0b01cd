// The prefill's 4-bit GEMM: y = x . W^T for a chunk of staged activation rows
// (prefill_act.h), dense or grouped by expert, on Hopper's warpgroup mma
// (wgmma.cuh). Shapes: W [rows][K] 4-bit (K a multiple of 64), x [slots][K] fp16
// staged; a block computes BM = 128 or 256 weight rows (8 or 16 tiles of 16)
// by BN = 16, 32, 64 or 128 slots and walks K a round (128 columns) at a time
// through a ring of 4 shared-memory stages filled by cp.async, three ahead.
//
// Weights (A, from registers): each stage holds the round's BM / 16 tile
// images (layout.h's tile layout, 1,152 bytes each: lane (g, t)'s 16 bytes of
// codes of rows g and g + 8, then the 16 rows' scale|bias words). Matrices in
// the tile layout are copied as they are; MLX-layout matrices (shapes with no
// tile layout, e.g. K % 128 == 64) are gathered into the same image, so one
// compute path serves both. Lane (g, t) turns word i of its codes into 4 fp16
// pairs of s q + b (pf::dequant8: 13 instructions for 8 weights), which are
// its A fragments of k steps 2 i and 2 i + 1; the contraction is order-free, so
// the staged activation is stored in that k order (staged_col) and B is a
// plain K-major operand: 128-byte rows of 64 k, swizzled, read by descriptor.
// No bf16/fp16 copy of a weight matrix exists outside the registers.
//
// Warps: two warpgroups along the weight rows, each a m64 tile (BM 128) or two
// (BM 256) by all BN slots, so each weight is dequantised once a block. Per
// word a warpgroup issues its 2 kTPW wgmmas as one group and dequantises the
// next word while they run. fp32 sums; the epilogue scales by the row's
// staging factor and stores, adds, applies SwiGLU (gate/up pairs) or the
// routing weight.
#include <algorithm>

#include "backends/cuda/host_state.h"
#include "backends/cuda/prefill_act.h"
#include "backends/cuda/prefill_gemm.h"
#include "backends/cuda/prefill_mma.cuh"
#include "backends/cuda/wgmma.cuh"

namespace tern::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kImg = kTileRoundBytes;      // a tile's round
constexpr int kPiecesA = kImg / 16;        // 72 16-byte pieces a tile round
constexpr int kRowBytes = kTileRound * 2;  // a staged row's round in fp16
constexpr int kAtomRow = 128;              // a B row of a swizzle atom: 64 k in fp16

template <int BM, int BN>
struct Cfg {
  static constexpr int kTilesM = BM / 16, kTPW = kTilesM / 8;  // tiles a block, a warp
  static constexpr int kABytes = kTilesM * kImg;               // a multiple of 1,024
  // Three stages for 96 slots (two blocks an SM fit then), else four.
  static constexpr int kStages = BN == 96 ? 3 : 4;
  static constexpr int kStage = kABytes + BN * kRowBytes;
  static constexpr int kMinBlocks = BN <= 32 || (BM == 128 && BN <= 96) ? 2 : 1;
  // + 1,024: the stages' B atoms must be 1,024-aligned (the swizzle is by address).
  static constexpr size_t kSmem =
      1024 + size_t(kStages) * kStage + BN * (sizeof(void*) + sizeof(float)) + BM * sizeof(int);
};

// A 16-byte shared-memory load the compiler cannot narrow (a lane's code
// chunks are 16 bytes apart: 4-byte loads of them would be 4-way conflicts).
__device__ __forceinline__ uint4 lds128_whole(const void* p) {
  uint4 v;
  asm("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "r"(smem_addr(p)));
  return v;
}

// v as fp16 bits, clamped to the finite range.
__device__ __forceinline__ uint16_t f16_bits(float v) {
  return __half_as_ushort(__float2half_rn(fminf(fmaxf(v, -65504.0f), 65504.0f)));
}

// Where a block's weight rows and slots come from (set up once a block).
struct Block {
  int group, row0, rows, m0;
};

__device__ __forceinline__ Block block_of(const GemmArgs& a, int bm, int bn) {
  Block b;
  b.m0 = int(blockIdx.x) * bm;
  if (a.map != nullptr) {
    const GemmTile t = a.map[blockIdx.y];
    b.group = t.group, b.row0 = t.row0, b.rows = t.rows;
  } else {
    b.group = 0, b.row0 = int(blockIdx.y) * bn, b.rows = min(bn, a.n - b.row0);
  }
  return b;
}

// The weight row of image row i (0..15) of tile slot `ts` in the group, or -1
// (zero row): gate/up pairs in the MLX layout take rows 0-7 from the gate half
// and 8-15 from the up half.
__device__ __forceinline__ int image_row(const GemmArgs& a, const Block& b, int ts, int i) {
  const int local = b.m0 + 16 * ts;
  int r;
  if (a.pair > 0) {
    const int f = local / 2 + (i & 7);
    if (f >= a.pair) return -1;
    r = (i < 8 ? 0 : a.pair) + f;
  } else {
    r = local + i;
    if (r >= a.group_rows) return -1;
  }
  r += b.group * a.group_rows;
  return r < a.W.rows ? r : -1;
}

// A thread's share of every stage's copies, its addresses worked out once a
// block (the index arithmetic per round cost more issue slots than the
// copies, 175a7da). Tile layout: the thread's 16-byte pieces of the tile images
// (pieces tid, tid + 256, ... of 72 a tile) advance 1,152 bytes a round; MLX
// layout: gathered through arow (the image rows' weight rows), the scale|bias
// words by plain stores. Activations: piece u = tid % 16 of rows tid / 16 +
// 16 m, all of the same parity, so one swizzled offset serves every m.
template <int BM, int BN, bool kTiled>
struct Loader {
  static constexpr int kTilesM = Cfg<BM, BN>::kTilesM, kABytes = Cfg<BM, BN>::kABytes;
  // Few registers (the BM 256 x BN 128 block has none to spare): the weight
  // pieces' addresses are recomputed each round from a base and a tile stride
  // (a multiply by a constant's inverse, a few instructions), the activation
  // rows' pointers read back from shared memory.
  const uint8_t* a_base = nullptr;
  int a_stride = 0, a_rows = 0;  // bytes a tile; tiles of the group left from m0
  const uint16_t* const* brow;
  int b_dst, b_chunk;

  __device__ Loader(const GemmArgs& a, const Block& b, const uint16_t* const* brow_) : brow(brow_) {
    const int tid = int(threadIdx.x);
    if constexpr (kTiled) {
      a_stride = a.W.cols / kTileRound * kImg;
      a_base = a.W.tiles + (size_t(b.group) * a.group_rows + b.m0) / 16 * a_stride;
      a_rows = (a.group_rows - b.m0 + 15) / 16;
    }
    // Chunk u (k 8 u..8 u + 7 of the round) of rows j0 + 16 m: 128-byte rows
    // of 64 k in two atom columns, the chunk swizzled by the row.
    const int u = tid % 16, j0 = tid / 16;
    b_dst = kABytes + (u / 8) * BN * kAtomRow + j0 * kAtomRow + 16 * ((u % 8) ^ (j0 % 8));
    b_chunk = u;
  }

  // Round r's copies into `stage` (not committed).
  __device__ void load(const GemmArgs& a, uint8_t* stage, int r, const int* arow) const {
    const int K = a.W.cols;
    if constexpr (kTiled) {
      constexpr int kA = (kTilesM * kPiecesA + kThreads - 1) / kThreads;  // pieces a thread
#pragma unroll
      for (int k = 0; k < kA; ++k) {
        const int idx = int(threadIdx.x) + kThreads * k, ts = idx / kPiecesA;
        if (kThreads * (k + 1) > kTilesM * kPiecesA && idx >= kTilesM * kPiecesA) continue;
        // Piece p = idx - 72 ts of tile ts: 16 idx in the stage.
        const bool ok = ts < a_rows;
        const uint8_t* src =
            a_base + size_t(ts) * a_stride + (r * kImg + 16 * (idx - kPiecesA * ts));
        cp_async16(stage + 16 * idx, ok ? src : a.W.tiles, ok);
      }
    } else {
      const int wpr = K / 8, gpr = K / kGroup;  // words, groups a row
      for (int idx = int(threadIdx.x); idx < kTilesM * kPiecesA; idx += kThreads) {
        const int ts = idx / kPiecesA, p = idx % kPiecesA;
        uint8_t* dst = stage + ts * kImg + 16 * p;
        if (p < 64) {
          const int i = (p % 32) / 4 + (p < 32 ? 0 : 8), t = p % 4;
          const int R = arow[16 * ts + i];
          const bool ok = R >= 0 && kTileRound * r + 32 * t < K;
          cp_async16(dst, a.W.w + size_t(ok ? R : 0) * wpr + 16 * r + 4 * t, ok);
        } else {
          uint32_t v[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int wi = 4 * (p - 64) + j, R = arow[16 * ts + wi / 2], grp = 2 * r + wi % 2;
            v[j] = R >= 0 && grp < gpr ? a.W.sb[size_t(R) * gpr + grp] : 0u;
          }
          *reinterpret_cast<uint4*>(dst) = make_uint4(v[0], v[1], v[2], v[3]);
        }
      }
    }
    // A last round of 64 columns is staged packed (staged_col): 8 bytes a
    // chunk, then 8 of zeros.
    const bool full = kTileRound * (r + 1) <= K;
    const int col = kTileRound * r + (full ? 8 : 4) * b_chunk;
#pragma unroll
    for (int m = 0; m < BN / 16; ++m) {
      const uint16_t* row = brow[int(threadIdx.x) / 16 + 16 * m];
      uint8_t* dst = stage + b_dst + m * 16 * kAtomRow;
      const uint16_t* src = row != nullptr ? row + col : a.x;
      if (full) {
        cp_async16_fill(dst, src, row != nullptr ? 16 : 0);
      } else {
        cp_async8_fill(dst, src, row != nullptr ? 8 : 0);
        cp_async8_fill(dst + 8, a.x, 0);
      }
    }
  }
};

template <int BM, int BN, GemmOut OUT, bool kTiled>
__global__ void __launch_bounds__(kThreads, (Cfg<BM, BN>::kMinBlocks)) gemm_kernel(GemmArgs a) {
  using C = Cfg<BM, BN>;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + (1024 - smem_addr(smem_raw) % 1024) % 1024;
  if (a.map_count != nullptr && int(blockIdx.y) >= *a.map_count) return;
  const Block b = block_of(a, BM, BN);
  const uint16_t** brow = reinterpret_cast<const uint16_t**>(smem + C::kStages * C::kStage);
  float* bscale = reinterpret_cast<float*>(brow + BN);
  int* arow = reinterpret_cast<int*>(bscale + BN);
  const int tid = int(threadIdx.x), K = a.W.cols;
  for (int j = tid; j < BN; j += kThreads) {
    const uint16_t* row = nullptr;
    float sc = 1.0f;
    if (j < b.rows) {
      const int slot = b.row0 + j, xr = a.xrow != nullptr ? a.xrow[slot] : slot;
      row = a.x + size_t(xr) * K;
      if (a.xscale != nullptr) sc = a.xscale[xr];
      // The routing weight folds into the slot's factor: the epilogue then
      // reads no global memory behind its own stores.
      if constexpr (OUT == GemmOut::weighted) sc *= a.row_w[slot];
    }
    brow[j] = row, bscale[j] = sc;
  }
  if (!kTiled)
    for (int i = tid; i < BM; i += kThreads) arow[i] = image_row(a, b, i / 16, i % 16);
  __syncthreads();
  const Loader<BM, BN, kTiled> ld(a, b, brow);

  // Split K (gridDim.z > 1, dense GEMMs of few blocks): this block's rounds.
  const int all_rounds = (K + kTileRound - 1) / kTileRound, split = int(gridDim.z);
  const int per = (all_rounds + split - 1) / split, rb = int(blockIdx.z) * per;
  const int rounds = max(0, min(all_rounds, rb + per) - rb);
  // Rounds r + 1..r + S - 1 in flight while round r is computed (S stages):
  // the stage round r + S - 1 goes to was last read in round r - 1, whose
  // wgmmas every thread has waited for before the barrier of round r.
#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < rounds) ld.load(a, smem + s * C::kStage, rb + s, arow);
    cp_async_commit();
  }

  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int wg = warp / 4, wi = warp % 4;  // warpgroup, warp in it
  // Warpgroup wg's m64 tile ts is the block's tiles 4 (kTPW wg + ts) + 0..3.
  const auto tile = [&](int ts) { return 4 * (C::kTPW * wg + ts) + wi; };
  float acc[C::kTPW][BN / 2] = {};
  for (int r = 0; r < rounds; ++r) {
    cp_async_wait<C::kStages - 2>();
    wg::fence_smem();
    __syncthreads();
    {
      const int next = r + C::kStages - 1;
      if (next < rounds) ld.load(a, smem + (next % C::kStages) * C::kStage, rb + next, arow);
      cp_async_commit();
    }
    const uint8_t* st = smem + (r % C::kStages) * C::kStage;
    const uint32_t bs = smem_addr(st + C::kABytes);
    // The lane's codes of the round (rows g and g + 8, 32 columns each) and
    // their groups' scale and bias, loaded once; the words dequantised in turn.
    uint4 code[C::kTPW][2];
    __half2 sc[C::kTPW][2], bi[C::kTPW][2];
#pragma unroll
    for (int ts = 0; ts < C::kTPW; ++ts) {
      const uint8_t* img = st + tile(ts) * kImg;
      const uint32_t* sbw = reinterpret_cast<const uint32_t*>(img + 1024);
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        code[ts][v] = lds128_whole(img + 512 * v + 16 * lane);
        pf::scale_bias_h2(sbw[2 * (g + 8 * v) + t / 2], sc[ts][v], bi[ts][v]);
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t af[C::kTPW][2][4];  // k steps 2 i, 2 i + 1 of each tile
#pragma unroll
      for (int ts = 0; ts < C::kTPW; ++ts) {
        uint32_t w0[4], w8[4];  // rows g and g + 8: pairs of word i
        pf::dequant8(pf::word(code[ts][0], i), sc[ts][0], bi[ts][0], w0);
        pf::dequant8(pf::word(code[ts][1], i), sc[ts][1], bi[ts][1], w8);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          af[ts][h][0] = w0[2 * h], af[ts][h][1] = w8[2 * h];
          af[ts][h][2] = w0[2 * h + 1], af[ts][h][3] = w8[2 * h + 1];
        }
      }
#pragma unroll
      for (int ts = 0; ts < C::kTPW; ++ts) wg::fence_operand(acc[ts]);
      wg::fence();
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int ks = 2 * i + h;  // atom column ks / 4, 32 bytes a step within it
        const uint64_t desc = wg::sw128_desc(bs + (ks / 4) * BN * kAtomRow + (ks % 4) * 32);
#pragma unroll
        for (int ts = 0; ts < C::kTPW; ++ts) wg::mma_f16<BN>(acc[ts], af[ts][h], desc);
      }
      wg::commit();
#pragma unroll
      for (int ts = 0; ts < C::kTPW; ++ts) wg::fence_operand(acc[ts]);
      // One group in flight while the next word is dequantised; none past the round.
      if (i < 3)
        wg::wait<1>();
      else
        wg::wait<0>();
    }
  }
#pragma unroll
  for (int ts = 0; ts < C::kTPW; ++ts) wg::fence_operand(acc[ts]);
  cp_async_wait<0>();

  // Epilogue: acc[ts][4 j + c] is weight row m0 + 16 tile(ts) + g (+8 for
  // c >= 2) of slot row0 + 8 j + 2 t (+1 for odd c).
#pragma unroll
  for (int ts = 0; ts < C::kTPW; ++ts) {
    const int m16 = b.m0 + 16 * tile(ts), m = m16 + g;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int jj = 8 * j + 2 * t + e;
        if (jj >= b.rows) continue;
        const int slot = b.row0 + jj;
        const float sc = bscale[jj], v0 = acc[ts][4 * j + e] * sc, v8 = acc[ts][4 * j + 2 + e] * sc;
        if (split > 1) {  // the K range's part, summed by split_reduce_kernel
          float* w = a.work + (size_t(blockIdx.z) * a.n + slot) * a.group_rows;
          if (m < a.group_rows) w[m] = v0;
          if (m + 8 < a.group_rows) w[m + 8] = v8;
          continue;
        }
        if constexpr (OUT == GemmOut::swiglu) {
          const int f = m16 / 2 + g, I = a.group_rows / 2;
          if (f < I) a.act[size_t(slot) * I + staged_col(f, I)] = f16_bits(siluf(v0) * v8);
        } else if constexpr (OUT == GemmOut::weighted) {
          uint16_t* y = a.y16 + size_t(slot) * a.ldy;
          if (m < a.group_rows) y[m] = f16_bits(v0);
          if (m + 8 < a.group_rows) y[m + 8] = f16_bits(v8);
        } else {
          // Adds by reductions (red.global.add, one a element, so still exact
          // and deterministic): a load of y behind each earlier store (they may
          // alias) cost a round trip apiece, ~40% of an out_proj (ncu at 2K).
          float* y = a.y + size_t(slot) * a.ldy;
          if (m < a.group_rows) {
            if constexpr (OUT == GemmOut::add)
              atomicAdd(y + m, v0);
            else
              y[m] = v0;
          }
          if (m + 8 < a.group_rows) {
            if constexpr (OUT == GemmOut::add)
              atomicAdd(y + m + 8, v8);
            else
              y[m + 8] = v8;
          }
        }
      }
  }
}

// The K-split parts in order (deterministic: no atomics), stored or added.
template <GemmOut OUT>
__global__ void split_reduce_kernel(GemmArgs a, int split) {
  const int m = int(blockIdx.x * blockDim.x + threadIdx.x), slot = int(blockIdx.y);
  if (m >= a.group_rows) return;
  float v = 0.0f;
  for (int z = 0; z < split; ++z) v += a.work[(size_t(z) * a.n + slot) * a.group_rows + m];
  float& y = a.y[size_t(slot) * a.ldy + m];
  y = OUT == GemmOut::add ? y + v : v;
}

// K splits for a dense GEMM whose blocks leave SMs idle (an out_proj of 2048
// rows at 32 tokens: 8 blocks walking K = 4096; fill_splits), each of at least
// 2 rounds, within the work area.
template <GemmOut OUT>
int k_splits(const GemmArgs& a, int blocks) {
  if (OUT == GemmOut::swiglu || OUT == GemmOut::weighted || a.map != nullptr || a.work == nullptr)
    return 1;
  const int rounds = (a.W.cols + kTileRound - 1) / kTileRound;
  const size_t fit = a.work_floats / (size_t(a.n) * size_t(a.group_rows));
  return fill_splits(blocks, std::min(rounds / 2, int(std::min<size_t>(fit, 64))));
}

template <int BM, int BN, GemmOut OUT, bool kTiled>
cudaError_t launch(const GemmArgs& a, cudaStream_t st) {
  using C = Cfg<BM, BN>;
  dim3 grid((a.group_rows + BM - 1) / BM, a.map != nullptr ? a.max_tiles : (a.n + BN - 1) / BN);
  if (grid.y == 0) return cudaSuccess;
  grid.z = unsigned(k_splits<OUT>(a, int(grid.x * grid.y)));
  auto* k = gemm_kernel<BM, BN, OUT, kTiled>;
  if (cudaError_t e =
          cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kSmem));
      e != cudaSuccess)
    return e;
  k<<<grid, kThreads, C::kSmem, st>>>(a);
  if (grid.z == 1) return cudaGetLastError();
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  split_reduce_kernel<OUT>
      <<<dim3(unsigned((a.group_rows + 255) / 256), unsigned(a.n)), 256, 0, st>>>(a, int(grid.z));
  return cudaGetLastError();
}

template <int BM, int BN, bool kTiled>
cudaError_t launch_out(const GemmArgs& a, cudaStream_t st) {
  constexpr bool kDense = !grouped_only_bn(BN);  // the MoE's widths: its two outputs only
  switch (a.out) {
    case GemmOut::store:
      if constexpr (kDense) return launch<BM, BN, GemmOut::store, kTiled>(a, st);
      break;
    case GemmOut::add:
      if constexpr (kDense) return launch<BM, BN, GemmOut::add, kTiled>(a, st);
      break;
    case GemmOut::swiglu:
      return launch<BM, BN, GemmOut::swiglu, kTiled>(a, st);
    case GemmOut::weighted:
      return launch<BM, BN, GemmOut::weighted, kTiled>(a, st);
  }
  return cudaErrorInvalidValue;
}

template <int BM, bool kTiled>
cudaError_t launch_bn(const GemmArgs& a, cudaStream_t st) {
  switch (a.bn) {
    case 16:
      return launch_out<BM, 16, kTiled>(a, st);
    case 32:
      return launch_out<BM, 32, kTiled>(a, st);
    case 48:
      if constexpr (BM == 128) return launch_out<BM, 48, kTiled>(a, st);
      break;
    case 64:
      return launch_out<BM, 64, kTiled>(a, st);
    case 96:
      if constexpr (BM == 128) return launch_out<BM, 96, kTiled>(a, st);
      break;
    case 128:
      return launch_out<BM, 128, kTiled>(a, st);
  }
  return cudaErrorInvalidValue;
}

template <bool kTiled>
cudaError_t launch_shape(const GemmArgs& a, cudaStream_t st) {
  return a.bm == 256 ? launch_bn<256, kTiled>(a, st) : launch_bn<128, kTiled>(a, st);
}

}  // namespace

size_t gemm_work_floats() {
  return 3 * size_t(sm_count()) * 256 * 64;
}

bool prefill_gemm_takes(const DMat& W) {
  const bool tiles = W.tiles != nullptr && tileable(W);
  const bool mlx = W.tiles == nullptr && W.w != nullptr && W.sb != nullptr;
  return W.bits == 4 && W.cols > 0 && W.cols % kGroup == 0 && (tiles || mlx);
}

cudaError_t prefill_gemm(const GemmArgs& a, cudaStream_t st) {
  if (!prefill_gemm_takes(a.W) || a.x == nullptr || a.group_rows <= 0 ||
      (a.map == nullptr && a.group_rows != a.W.rows) ||
      (a.W.tiles != nullptr && a.group_rows % 16 != 0 && a.map != nullptr))
    return cudaErrorInvalidValue;
  if (a.out == GemmOut::swiglu && (a.act == nullptr || a.group_rows % 16 != 0))
    return cudaErrorInvalidValue;
  if ((a.out == GemmOut::store || a.out == GemmOut::add) && a.y == nullptr)
    return cudaErrorInvalidValue;
  if (a.out == GemmOut::weighted && (a.y16 == nullptr || a.row_w == nullptr))
    return cudaErrorInvalidValue;
  if (a.map == nullptr && a.n <= 0) return cudaSuccess;
  if ((a.bm != 128 && a.bm != 256) || !gemm_bn_valid(a.bn, a.map != nullptr) ||
      (grouped_only_bn(a.bn) && a.bm != 128))
    return cudaErrorInvalidValue;
  return a.W.tiles != nullptr ? launch_shape<true>(a, st) : launch_shape<false>(a, st);
}

}  // namespace tern::cuda
