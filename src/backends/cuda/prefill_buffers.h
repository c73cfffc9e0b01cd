// The prefill's device temporaries (Prefill::buffers, prefill_buffers.cpp),
// sized for the largest chunk so far and reused by every chunk and call: peak
// memory grows with the KV cache only. Shapes for a chunk of T tokens, A =
// T (top_k + 1) MoE slots.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cuda/gdn_prefill.h"
#include "backends/cuda/moe_prefill.h"
#include "backends/cuda/prefill.h"

namespace tern::cuda {

struct Prefill::Buffers {
  int T = 0;                // tokens a chunk they hold
  int tile_cap = 0;         // MoE tile-map entries
  std::vector<void*> ptrs;  // everything, freed at the end
  float* h = nullptr;       // [T][D] residual stream
  uint16_t* x16 = nullptr;  // [T][max K] staged GEMM input
  float* xscale = nullptr;  // [T]
  float* a32 = nullptr;     // [T][D] the router's input
  float* proj = nullptr;    // [T][max(GDN in rows, attention qkv rows)]
  float *q = nullptr, *k = nullptr, *v = nullptr, *beta = nullptr, *g = nullptr;
  float* o = nullptr;           // [T][max(Hv 128, H 256)] delta rule / attention output
  float* delta = nullptr;       // chunked delta rule scratch
  uint16_t* q16 = nullptr;      // [H][T][256]
  float* flash_work = nullptr;  // attention's split-key sums (flash_work_floats)
  size_t flash_floats = 0;
  float* gemm_work = nullptr;  // dense GEMMs' split-K parts (gemm_work_floats)
  size_t gemm_floats = 0;
  float* rlogits = nullptr;  // [parts][T][E + 1] (router_logit_floats)
  int *counts = nullptr, *offsets = nullptr, *cursor = nullptr, *ids = nullptr;
  float* wts = nullptr;
  int *slot_row = nullptr, *token_slot = nullptr, *map_count = nullptr;
  float* slot_w = nullptr;
  GemmTile* map = nullptr;
  uint16_t* act = nullptr;  // [A][I] staged SwiGLU output
  uint16_t* y16 = nullptr;  // [A][D] expert outputs by slot, fp16
  float* lbuf = nullptr;    // [kLogitRows][V] all-token logits, a piece at a time
  int* tokens = nullptr;    // [capacity] the call's tokens
  int64_t token_cap = 0;

  static constexpr int kLogitRows = 256;
  ~Buffers();
};

}  // namespace tern::cuda
