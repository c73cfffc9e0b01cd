#include "backends/cuda/prefill_tiles.h"

#include "backends/cuda/moe_prefill.h"
#include "backends/cuda/prefill_gemm.h"
#include "core/error.h"

namespace tern::cuda {

void check_prefill_options(const PrefillOptions& o) {
  if (o.chunk < 1 || o.step_below < 1 || o.chunked_from < 1 ||
      (o.moe_bn != 0 && !gemm_bn_valid(o.moe_bn, true)) ||
      (o.dense_bn != 0 && !gemm_bn_valid(o.dense_bn, false)) ||
      (o.gemm_bm != 0 && o.gemm_bm != 128 && o.gemm_bm != 256) ||
      (o.moe_bm != 0 && o.moe_bm != 128 && o.moe_bm != 256) ||
      (grouped_only_bn(o.moe_bn) && o.moe_bm == 256))
    fail(
        "prefill options: chunk {}, step_below {}, chunked_from {}, moe_bn {}, dense_bn {}, "
        "gemm_bm {}, moe_bm {}",
        o.chunk, o.step_below, o.chunked_from, o.moe_bn, o.dense_bn, o.gemm_bm, o.moe_bm);
}

TilePlan plan_tiles(int T, const ModelConfig& c, const PrefillOptions& o) {
  TilePlan p;
  // Tiles no wider than the rows they get: a short chunk's GEMMs are bound by
  // reading the weights, not by the mmas of empty tile columns.
  p.dense_bn = o.dense_bn != 0 ? o.dense_bn : T <= 16 ? 16 : T <= 32 ? 32 : T <= 512 ? 64 : 128;
  // 128 weight rows at 64 slots (33 to 512 tokens): the dense GEMMs of a
  // 256- / 512-token prompt took 2.9 / 4.6 ms against 3.4 / 5.1 with 256 rows
  // (bench/results/prefill-tiles-*); 256 rows past that (2K: 14.7 against 16.7).
  p.dense_bm = o.gemm_bm != 0 ? o.gemm_bm : p.dense_bn == 64 ? 128 : 256;
  // By the mean rows an expert (T top_k / E), wide enough that most experts
  // take one tile (each tile dequantises its weights once): 48 slots from 1K
  // and 96 from 2K measured 31,451 against 30,706 (32) and 40,876 against
  // 38,867 (64) tok/s, 96 also ahead from 4K to 32K (bench/results/
  // prefill-ab-bb04154-h100.txt). Random routing spreads rows evenly; a real
  // router's busy experts take more tiles.
  const int per_expert = T * c.top_k / c.n_experts;
  p.moe_bn = o.moe_bn != 0      ? o.moe_bn
             : per_expert <= 10 ? 16
             : per_expert <= 24 ? 32
             : per_expert <= 40 ? 48
                                : 96;
  p.moe_bm = o.moe_bm != 0 ? o.moe_bm : p.moe_bn == 64 || grouped_only_bn(p.moe_bn) ? 128 : 256;
  p.moe_tiles = route_max_tiles(T, c.n_experts, c.top_k, p.moe_bn);
  p.gdn_chunked = T >= o.chunked_from;
  p.logits_bm = o.gemm_bm != 0 ? o.gemm_bm : 256;
  return p;
}

}  // namespace tern::cuda
