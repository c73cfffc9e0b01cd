// The shapes and layouts every CUDA kernel family shares: the widths the
// kernels are written for, the affine-quantised matrix on the device (the MLX
// layout and the tile layout the tensor-core paths read) and the KV cache's
// chunked layout. Activations are fp32, weights stay affine 4/8-bit (MLX
// layout, group 64), the KV cache is bf16, recurrent and conv state fp32.
// Each family's launchers are in the header named after its .cu (gemv.h for
// gemv.cu, ...): host-callable, plain pointers, one params struct per kernel,
// every kernel with a CPU twin and a test in tests/cuda/test_<family>.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tern::cuda {

constexpr int kGroup = 64;     // quantisation group (checked at load)
constexpr int kGdnDim = 128;   // GDN key and value head width (checked at load)
constexpr int kHeadDim = 256;  // attention head width (checked at load)
constexpr int kMaxTopK = 8;

// An affine-quantised matrix on the device, MLX layout: `w` rows of cols*bits/32
// words, `sb` [rows][cols/64] scale|bias words. A 4-bit matrix the tensor-core
// GEMVs read is kept in the tile layout instead (`tiles`; w and sb null):
// 16-row tiles of 9 * cols bytes (the last padded with zero rows), each a run
// of 1,152-byte rounds of 128 columns: per lane (g, t) of a warp the 16 bytes
// of codes at chunk 4 round + t of the tile's row g, then the same of row
// g + 8, then the 16 rows' scale|bias words of the round's two groups (row i,
// group j at word 2 i + j). A lane's loads are then contiguous across the warp
// (no shared-memory bank conflicts) and a tile is one bulk copy.
struct DMat {
  const uint32_t* w = nullptr;
  // Per row and group: the bf16 scale in the low half, the bf16 bias in the
  // high half (one load for both).
  const uint32_t* sb = nullptr;
  const uint8_t* tiles = nullptr;
  int rows = 0, cols = 0, bits = 0;
  size_t bytes() const {
    return size_t(rows) * cols * bits / 8 + size_t(rows) * (cols / kGroup) * 4;
  }
};

constexpr int kTileRound = 128;        // columns a round of a tile
constexpr int kTileRoundBytes = 1152;  // 16 rows x 128 codes + 32 words
// Whether m's shape has a tile layout.
inline bool tileable(const DMat& m) {
  return m.bits == 4 && m.cols > 0 && m.cols % kTileRound == 0;
}
// Bytes of m in the tile layout.
inline size_t tiled_bytes(const DMat& m) {
  return size_t(m.rows + 15) / 16 * (m.cols / kTileRound) * kTileRoundBytes;
}
// A scale and a bias (bf16 bits) as one DMat::sb word.
inline uint32_t scale_bias(uint16_t s, uint16_t b) {
  return uint32_t(s) | uint32_t(b) << 16;
}

// The KV cache of a layer: K and V each bf16 [kv][capacity][256], capacity a
// multiple of 16, every 16 positions one 8 KB chunk whose 16-byte pieces
// (8 dims) lie in the order the attention's lanes read them, so that a chunk is
// one bulk copy: dims 8q..8q+7 of position o of the chunk are K's piece
// k_piece(o, q) and V's piece v_piece(o, q).
constexpr int kKvChunk = 16;
__host__ __device__ constexpr int k_piece(int o, int q) {
  return ((o / 8) * 8 + q / 4) * 32 + (o % 8) * 4 + q % 4;
}
__host__ __device__ constexpr int v_piece(int o, int q) {
  return (((o & 1) + 2 * (o / 8)) * 4 + q / 8) * 32 + (q % 8) * 4 + (o % 8) / 2;
}

}  // namespace tern::cuda
