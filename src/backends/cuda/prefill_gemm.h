// Launcher of the prefill's 4-bit GEMM (prefill_gemm.cu), dense or grouped
// by expert, on staged activations (prefill_act.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/layout.h"
#include "backends/cuda/prefill_act.h"

namespace tern::cuda {

// y = x . W^T on tensor cores (wgmma m64nBNk16, fp16 operands, fp32 sums): the
// weights dequantised to fp16 in registers from either layout (tile or MLX,
// layout.h), `bm` weight rows by `bn` staged rows a block. The weight rows are
// split into groups of `group_rows` (the experts of a stack; the whole matrix
// for a dense GEMM); a block's rows come from a tile map (grouped) or are
// rows n * BN.. of the only group (dense).
enum class GemmOut {
  store,    // y[slot * ldy + m] = v
  add,      // y[slot * ldy + m] += v
  swiglu,   // gate/up pairs (misc.h's to_tiles pairs): act[slot][staged f] = fp16(silu(g) u)
  weighted  // y16[slot * ldy + m] = fp16(v * row_w[slot])
};
// One N-tile of a grouped GEMM: rows [row0, row0 + rows) of the sorted
// activations, all of group `group`.
struct GemmTile {
  int group, row0, rows, pad;
};
struct GemmArgs {
  DMat W;              // 4-bit: tiles, or w + sb (MLX layout)
  int group_rows = 0;  // weight rows a group (an expert); W.rows for a dense GEMM
  int pair = 0;        // MLX-layout gate/up stacks: the expert width (rows per group 2 pair)
  const uint16_t* x = nullptr;    // staged activations [*][W.cols]
  const int* xrow = nullptr;      // slot -> row of x (a gather), or null: slot itself
  const float* xscale = nullptr;  // per row of x, or null: 1
  // Dense: n slots, tiles of BN. Grouped: map[0 .. *map_count) (max_tiles launched).
  int n = 0;
  const GemmTile* map = nullptr;
  const int* map_count = nullptr;
  int max_tiles = 0;
  GemmOut out = GemmOut::store;
  float* y = nullptr;
  int ldy = 0;
  uint16_t* act = nullptr;  // swiglu: [slots][group_rows / 2] staged fp16 (no row scale)
  // weighted: [slots][ldy] fp16 (half the bytes of fp32 written by the down
  // projection and read back by moe_combine, nine rows a token).
  uint16_t* y16 = nullptr;
  const float* row_w = nullptr;  // weighted: per slot
  int bn = 128;                  // staged rows a block (gemm_bn_valid)
  int bm = 256;                  // 128 or 256 weight rows a block
  // Dense store/add GEMMs of few blocks split K into parts summed in order
  // here (null: never split): S parts take S n group_rows floats.
  float* work = nullptr;
  size_t work_floats = 0;
};
// A work area that takes the splits of any dense GEMM with tiles up to 64 wide.
size_t gemm_work_floats();
// Slots a tile: 16, 32, 64 or 128; grouped GEMMs (the MoE's tile map) also
// 48 and 96 (with bm 128), widths that hold an expert's rows in one tile at
// 1K and 2K prompts.
constexpr bool grouped_only_bn(int bn) {
  return bn == 48 || bn == 96;
}
constexpr bool gemm_bn_valid(int bn, bool grouped) {
  return bn == 16 || bn == 32 || bn == 64 || bn == 128 || (grouped && grouped_only_bn(bn));
}
cudaError_t prefill_gemm(const GemmArgs& a, cudaStream_t st);
// Whether prefill_gemm takes W (4-bit, columns a multiple of 64; either layout).
bool prefill_gemm_takes(const DMat& W);

}  // namespace tern::cuda
