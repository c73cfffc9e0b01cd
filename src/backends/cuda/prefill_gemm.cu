// The prefill's 4-bit GEMM: y = x . W^T for a chunk of staged activation rows
// (prefill_kernels.h), dense or grouped by expert, on tensor cores. Shapes: W
// [rows][K] 4-bit (K a multiple of 64), x [slots][K] fp16 staged; a block
// computes 128 weight rows (8 tiles of 16) by BN = 64 or 128 slots and walks K
// a round (128 columns) at a time through a ring of shared-memory stages
// filled by cp.async.
//
// Weights: each stage holds the round's 8 tile images (kernels.h's tile
// layout, 1,152 bytes each: lane (g, t)'s 16 bytes of codes of rows g and
// g + 8, then the 16 rows' scale|bias words). Matrices in the tile layout are
// copied as they are; MLX-layout matrices (shapes with no tile layout, e.g.
// K % 128 == 64) are gathered into the same image, so one compute path serves
// both. Lane (g, t) turns word i of its codes into 4 fp16 pairs of s q + b
// (pf::dequant8: 13 instructions for 8 weights), which are the A fragments of
// two k16 steps; the contraction is order-free, so the staged activation is
// stored in the matching order and a B fragment pair is one 16-byte load.
// No bf16/fp16 copy of a weight matrix exists outside the registers.
//
// Warps: 4 along the weight rows (32 rows: 2 tiles) by 2 along the slots
// (BN / 2: BN / 16 n8-tiles), so each dequantised fragment feeds BN / 8 mmas
// and each B fragment 2. fp32 sums; the epilogue scales by the row's staging
// factor and stores, adds, applies SwiGLU (gate/up pairs) or the routing
// weight.
#include <algorithm>

#include "backends/cuda/prefill_kernels.h"
#include "backends/cuda/prefill_mma.cuh"

namespace tern::cuda {

namespace {

constexpr int kBM = 128, kTilesM = kBM / 16, kThreads = 256;
constexpr int kImg = kTileRoundBytes;      // a tile's round
constexpr int kPiecesA = kImg / 16;        // 72 16-byte pieces a tile round
constexpr int kABytes = kTilesM * kImg;    // 9,216
constexpr int kRowBytes = kTileRound * 2;  // a staged row's round in fp16

template <int BN>
struct Cfg {
  static constexpr int kStages = BN == 128 ? 3 : 4;
  static constexpr int kStage = kABytes + BN * kRowBytes;
  static constexpr int kNT = BN / 16;  // n8-tiles a warp
  static constexpr size_t kSmem =
      size_t(kStages) * kStage + BN * (sizeof(void*) + sizeof(float)) + kBM * sizeof(int);
};

// Where a block's weight rows and slots come from (set up once a block).
struct Block {
  int group, row0, rows, m0;
};

__device__ __forceinline__ Block block_of(const GemmArgs& a, int bn) {
  Block b;
  b.m0 = int(blockIdx.x) * kBM;
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

// Copies round r's weights and activations into a stage (cp.async, not
// committed; the MLX layout's scale|bias words by plain stores).
template <int BN>
__device__ __forceinline__ void load_stage(const GemmArgs& a, const Block& b, uint8_t* stage, int r,
                                           const uint16_t* const* brow, const int* arow) {
  const int K = a.W.cols, tid = int(threadIdx.x);
  // Weights.
  if (a.W.tiles != nullptr) {
    const int rounds = K / kTileRound;
    const size_t tile0 = (size_t(b.group) * a.group_rows + b.m0) / 16;
    for (int idx = tid; idx < kTilesM * kPiecesA; idx += kThreads) {
      const int ts = idx / kPiecesA, p = idx % kPiecesA;
      const bool ok = b.m0 + 16 * ts < a.group_rows;
      const uint8_t* src = a.W.tiles + ((tile0 + ts) * rounds + r) * kImg + 16 * p;
      cp_async16(stage + ts * kImg + 16 * p, ok ? src : a.W.tiles, ok);
    }
  } else {
    const int wpr = K / 8, gpr = K / kGroup;  // words, groups a row
    for (int idx = tid; idx < kTilesM * kPiecesA; idx += kThreads) {
      const int ts = idx / kPiecesA, p = idx % kPiecesA;
      uint8_t* dst = stage + ts * kImg + 16 * p;
      if (p < 64) {
        const int i = (p % 32) / 4 + (p < 32 ? 0 : 8), t = p % 4;
        const int R = arow[16 * ts + i];
        const bool ok = R >= 0 && kTileRound * r + 32 * t < K;
        const uint32_t* src = a.W.w + size_t(ok ? R : 0) * wpr + 16 * r + 4 * t;
        cp_async16(dst, src, ok);
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
  // Activations: thread tid copies piece u = tid % 16 of rows tid / 16 + 16 m.
  uint8_t* bs = stage + kABytes;
  const int u = tid % 16, col = kTileRound * r + 8 * u;
#pragma unroll
  for (int m = 0; m < BN / 16; ++m) {
    const int j = tid / 16 + 16 * m;
    const uint16_t* row = brow[j];
    const bool ok = row != nullptr && col < K;
    cp_async16(bs + j * kRowBytes + 16 * pf::b_piece(u, j), ok ? row + col : a.x, ok);
  }
}

template <int BN, GemmOut OUT>
__global__ void __launch_bounds__(kThreads, BN == 64 ? 2 : 1) gemm_kernel(GemmArgs a) {
  using C = Cfg<BN>;
  extern __shared__ __align__(16) uint8_t smem[];
  if (a.map_count != nullptr && int(blockIdx.y) >= *a.map_count) return;
  const Block b = block_of(a, BN);
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
    }
    brow[j] = row, bscale[j] = sc;
  }
  if (a.W.tiles == nullptr)
    for (int i = tid; i < kBM; i += kThreads) arow[i] = image_row(a, b, i / 16, i % 16);
  __syncthreads();

  const int rounds = (K + kTileRound - 1) / kTileRound;
#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < rounds) load_stage<BN>(a, b, smem + s * C::kStage, s, brow, arow);
    cp_async_commit();
  }

  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int wm = warp & 3, wn = warp >> 2;
  float acc[2][C::kNT][4] = {};
  for (int r = 0; r < rounds; ++r) {
    cp_async_wait<C::kStages - 2>();
    __syncthreads();
    {
      const int next = r + C::kStages - 1;
      if (next < rounds)
        load_stage<BN>(a, b, smem + (next % C::kStages) * C::kStage, next, brow, arow);
      cp_async_commit();
    }
    const uint8_t* st = smem + (r % C::kStages) * C::kStage;
    uint4 q[2][2];
    __half2 s[2][2], bb[2][2];
#pragma unroll
    for (int ts = 0; ts < 2; ++ts) {
      const uint8_t* img = st + (2 * wm + ts) * kImg;
      q[ts][0] = pf::lds128(img + 16 * lane);
      q[ts][1] = pf::lds128(img + 512 + 16 * lane);
      const uint32_t* sbw = reinterpret_cast<const uint32_t*>(img + 1024);
      pf::scale_bias_h2(sbw[2 * g + t / 2], s[ts][0], bb[ts][0]);
      pf::scale_bias_h2(sbw[2 * (g + 8) + t / 2], s[ts][1], bb[ts][1]);
    }
    const uint8_t* bs = st + kABytes + (wn * (BN / 2) + g) * kRowBytes;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t w[2][2][4];  // [tile][row g, g + 8][pair]
#pragma unroll
      for (int ts = 0; ts < 2; ++ts)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          pf::dequant8(pf::word(q[ts][h], i), s[ts][h], bb[ts][h], w[ts][h]);
      const int piece = pf::b_piece(4 * t + i, g);  // rows wn BN/2 + 8 j + g: parity of g
#pragma unroll
      for (int j = 0; j < C::kNT; ++j) {
        const uint4 x = pf::lds128(bs + j * 8 * kRowBytes + 16 * piece);
#pragma unroll
        for (int ts = 0; ts < 2; ++ts) {
          pf::mma_f16(acc[ts][j], w[ts][0][0], w[ts][1][0], w[ts][0][1], w[ts][1][1], x.x, x.y);
          pf::mma_f16(acc[ts][j], w[ts][0][2], w[ts][1][2], w[ts][0][3], w[ts][1][3], x.z, x.w);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Epilogue: acc[ts][j][c] is weight row m0 + 32 wm + 16 ts + g (+8 for c >= 2)
  // of slot row0 + wn BN/2 + 8 j + 2 t (+1 for odd c).
#pragma unroll
  for (int ts = 0; ts < 2; ++ts) {
    const int m = b.m0 + 32 * wm + 16 * ts + g;
#pragma unroll
    for (int j = 0; j < C::kNT; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int jj = wn * (BN / 2) + 8 * j + 2 * t + e;
        if (jj >= b.rows) continue;
        const int slot = b.row0 + jj;
        const float sc = bscale[jj], v0 = acc[ts][j][e] * sc, v8 = acc[ts][j][2 + e] * sc;
        if constexpr (OUT == GemmOut::swiglu) {
          const int f = (b.m0 + 32 * wm + 16 * ts) / 2 + g, I = a.group_rows / 2;
          if (f < I) {
            const float y = fminf(fmaxf(siluf(v0) * v8, -65504.0f), 65504.0f);
            a.act[size_t(slot) * I + staged_col(f)] = __half_as_ushort(__float2half_rn(y));
          }
        } else {
          const float wgt = OUT == GemmOut::weighted ? a.row_w[slot] : 1.0f;
          float* y = a.y + size_t(slot) * a.ldy;
          if (m < a.group_rows) {
            if constexpr (OUT == GemmOut::add)
              y[m] += v0;
            else
              y[m] = v0 * wgt;
          }
          if (m + 8 < a.group_rows) {
            if constexpr (OUT == GemmOut::add)
              y[m + 8] += v8;
            else
              y[m + 8] = v8 * wgt;
          }
        }
      }
  }
}

template <int BN, GemmOut OUT>
cudaError_t launch(const GemmArgs& a, cudaStream_t st) {
  using C = Cfg<BN>;
  const dim3 grid((a.group_rows + kBM - 1) / kBM,
                  a.map != nullptr ? a.max_tiles : (a.n + BN - 1) / BN);
  if (grid.y == 0) return cudaSuccess;
  auto* k = gemm_kernel<BN, OUT>;
  if (cudaError_t e =
          cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kSmem));
      e != cudaSuccess)
    return e;
  k<<<grid, kThreads, C::kSmem, st>>>(a);
  return cudaGetLastError();
}

template <int BN>
cudaError_t launch_out(const GemmArgs& a, cudaStream_t st) {
  switch (a.out) {
    case GemmOut::store:
      return launch<BN, GemmOut::store>(a, st);
    case GemmOut::add:
      return launch<BN, GemmOut::add>(a, st);
    case GemmOut::swiglu:
      return launch<BN, GemmOut::swiglu>(a, st);
    case GemmOut::weighted:
      return launch<BN, GemmOut::weighted>(a, st);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

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
  if (a.out != GemmOut::swiglu && a.y == nullptr) return cudaErrorInvalidValue;
  if (a.out == GemmOut::weighted && a.row_w == nullptr) return cudaErrorInvalidValue;
  if (a.map == nullptr && a.n <= 0) return cudaSuccess;
  return a.bn == 64 ? launch_out<64>(a, st) : launch_out<128>(a, st);
}

}  // namespace tern::cuda
