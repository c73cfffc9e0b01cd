// Launchers of the decode GEMVs (gemv.cu): batch-1 GEMV over an affine
// 4/8-bit matrix, on tensor cores from the tile layout (tile_gemv.cuh) or
// SIMT from the MLX layout, with the input's RMSNorm in the prologue and the
// store, residual add (feeding the next router) and GDN conv epilogues.
#pragma once

#include "backends/cuda/layout.h"

namespace tern::cuda {

// Whether the tensor-core GEMV takes a matrix of this shape in the tile
// layout (the loader tiles exactly these; the others stay in the MLX layout
// for the SIMT kernel).
bool gemv_tiles(const DMat& m);

// The tiles a later dense GEMV copies after staging (each of its `blocks`
// blocks' run but the first `skip`), which a tile GEMV brings into L2 once its
// own copies are out, so the later copies hit L2 instead of waiting for DRAM.
struct L2Ahead {
  const uint8_t* tiles = nullptr;
  uint32_t tile_bytes = 0;
  int n = 0, blocks = 0, skip = 0;
};

// What the GEMV does with each output row.
enum class GemvOut { store, add, conv };

// The causal conv fused into the GDN in-projection: rows < channels are
// conv-ed with the carried state, SiLU-ed and written to `out`; the state
// ([kernel-1][channels], oldest first) advances by one row. The next
// gate_rows rows (z) are stored SiLU-ed: the gated norm's gate, activated once
// here instead of in every block of the out-projection that stages it.
struct ConvArgs {
  const float* weight = nullptr;  // [channels][kernel]
  float* state = nullptr;
  float* out = nullptr;
  int channels = 0, kernel = 0, gate_rows = 0;
};

// The next router's logits, fed by the GEMV that finishes h (GemvOut::add):
// every block adds its rows' share of router(h * norm), before the RMSNorm
// factor, into one of kFeedCopies copies of the logits (fewer atomics on one
// address) in 2^-32 fixed point, so the sums come out the same in any order.
// route_experts_up reads, adds and re-zeroes them.
constexpr int kFeedCopies = 8;
struct RouterFeed {
  DMat W;                             // the 8-bit router; W.cols = the GEMV's rows
  const float* norm = nullptr;        // the post-attention RMSNorm weight
  unsigned long long* acc = nullptr;  // [kFeedCopies][W.rows], zero before the first feed
};

// The input's RMSNorm: over all of x (norm_group 0), or over every norm_group
// (a power of two, 8..128) columns with the multiplier norm[k % norm_group]
// and then gate[k], already SiLU-ed (the GDN gated norm, its gate as the
// in-projection stored it: ConvArgs::gate_rows; tensor-core path only).
struct GemvArgs {
  DMat W;
  const float* x = nullptr;     // [W.cols]
  const float* norm = nullptr;  // optional RMSNorm multiplier applied to x first
  float eps = 1e-6f;
  float* y = nullptr;  // [W.rows]
  GemvOut out = GemvOut::store;
  ConvArgs conv = {};    // GemvOut::conv only
  RouterFeed feed = {};  // GemvOut::add only, where gemv_feeds(W)
  int norm_group = 0;
  const float* gate = nullptr;  // [W.cols], with norm_group
};
cudaError_t gemv(const GemvArgs& a, cudaStream_t st);
// The GEMV of each row of a step (rows.h): the same matrix, norm, epilogue
// and router for all, each row its own x, y, gate, conv state and feed. On the
// tensor-core path each tile is read once for all rows; every row's outputs
// are bit for bit those of gemv() on it alone.
cudaError_t gemv_rows(const GemvArgs* rows, int n, cudaStream_t st);
// What brings a later gemv over W's late tiles into L2 (none off the
// tensor-core path).
L2Ahead gemv_ahead(const DMat& W);
// Whether a GEMV over W can feed a router (the tensor-core path with one
// 16-row tile per block).
bool gemv_feeds(const DMat& W);

}  // namespace tern::cuda
