// The prefill's knobs (PrefillOptions: the defaults, tern bench's overrides)
// and the plan of a chunk's launch shapes they override (plan_tiles): the
// GEMMs' tiles, the delta rule's form and the MoE tile map's bound, by the
// chunk's tokens. Host code that needs no GPU: tests/cuda/test_prefill_tiles.cpp
// checks it on any machine.
#pragma once

#include "checkpoint/config.h"

namespace tern::cuda {

// How CudaBackend::forward runs a prompt. Calls of fewer than step_below
// tokens run the decode step graph token by token; longer ones run in chunks
// of at most `chunk` tokens, whose temporaries are allocated once for the
// largest chunk and reused. The rest override plan_tiles' choices (0: its own).
struct PrefillOptions {
  int chunk = 8192;
  // Below ~5 tokens the decode step (1.23 ms a token at 4K on the H100) beats a
  // prefill chunk's fixed cost: 6.9 ms for 8 tokens, 8.6 ms for 16 (~5.3 ms +
  // 0.21 ms a token; bench/results/short-moe-bn-9238ccf-h100.txt): the threshold
  // follows that fixed cost, so re-measure both when the short-chunk kernels change.
  int step_below = 6;
  // GDN: the chunked (WY) form from this many tokens a chunk, else the scan (equal at 128,
  // the scan 2-3% faster below, the chunked form faster above at b21e7b3:
  // bench/results/prefill-variants-b21e7b3.txt).
  int chunked_from = 128;
  int moe_bn = 0;    // grouped GEMM slots a tile, 16, 32, 48, 64, 96 or 128; 0: by rows per expert
  int dense_bn = 0;  // dense GEMM slots a tile, 16, 32, 64 or 128; 0: by the chunk's tokens
  int gemm_bm = 0;   // dense GEMM weight rows a tile, 128 or 256; 0: by the tile's slots
  int moe_bm = 0;    // grouped GEMM weight rows a tile, 128 or 256; 0: with moe_bn's choice
};
// tern::Error naming every option unless each is one the kernels take.
void check_prefill_options(const PrefillOptions& o);

// The launch shapes of a chunk of T tokens.
struct TilePlan {
  int dense_bn = 0, dense_bm = 0;  // dense GEMMs: slots and weight rows a tile
  int moe_bn = 0, moe_bm = 0;      // the experts' grouped GEMMs
  int moe_tiles = 0;               // tiles the MoE's map may need (route_max_tiles)
  bool gdn_chunked = false;        // the delta rule's chunked (WY) form, else the scan
  int logits_bm = 0;               // the all-rows lm_head GEMM's weight rows a tile
  // Its slots a tile for a piece of `rows` rows.
  static int logits_bn(int rows) { return rows <= 64 ? 64 : 128; }
};
TilePlan plan_tiles(int T, const ModelConfig& c, const PrefillOptions& o);

}  // namespace tern::cuda
