// The prefill's tile plan (prefill_tiles.h) and its options' checks: host code
// only, so these run without a GPU. The plan's choices at the chunk sizes
// where they change, for 35b-a3b (256 experts, top 8), and every override.
#include <gtest/gtest.h>

#include "backends/cuda/moe_prefill.h"
#include "backends/cuda/prefill_tiles.h"
#include "checkpoint/config.h"
#include "core/error.h"

namespace tern::test {
namespace {

ModelConfig model() {
  return parse_config(preset_config("35b-a3b"), "35b-a3b");
}

TEST(PrefillTiles, DenseTilesFollowTheChunk) {
  const ModelConfig c = model();
  struct Want {
    int T, bn, bm;
  };
  for (const Want w :
       {Want{1, 16, 256}, Want{16, 16, 256}, Want{17, 32, 256}, Want{32, 32, 256},
        Want{33, 64, 128}, Want{512, 64, 128}, Want{513, 128, 256}, Want{8192, 128, 256}}) {
    const cuda::TilePlan p = cuda::plan_tiles(w.T, c, {});
    EXPECT_EQ(p.dense_bn, w.bn) << w.T << " tokens";
    EXPECT_EQ(p.dense_bm, w.bm) << w.T << " tokens";
    EXPECT_EQ(p.logits_bm, 256) << w.T << " tokens";
  }
}

// By the mean rows an expert, T top_k / E: 16 slots to 10 rows, 32 to 24, 48
// to 40, else 96; 128 weight rows with the grouped-only widths.
TEST(PrefillTiles, ExpertTilesFollowTheRowsAnExpert) {
  const ModelConfig c = model();
  ASSERT_EQ(c.n_experts, 256);
  ASSERT_EQ(c.top_k, 8);
  struct Want {
    int T, bn, bm;
  };
  for (const Want w :
       {Want{8, 16, 256}, Want{351, 16, 256}, Want{352, 32, 256}, Want{799, 32, 256},
        Want{800, 48, 128}, Want{1311, 48, 128}, Want{1312, 96, 128}, Want{8192, 96, 128}}) {
    const cuda::TilePlan p = cuda::plan_tiles(w.T, c, {});
    EXPECT_EQ(p.moe_bn, w.bn) << w.T << " tokens";
    EXPECT_EQ(p.moe_bm, w.bm) << w.T << " tokens";
    EXPECT_EQ(p.moe_tiles, cuda::route_max_tiles(w.T, c.n_experts, c.top_k, w.bn));
  }
}

TEST(PrefillTiles, TheDeltaRuleIsChunkedFromChunkedFrom) {
  const ModelConfig c = model();
  const cuda::PrefillOptions o;
  EXPECT_FALSE(cuda::plan_tiles(o.chunked_from - 1, c, o).gdn_chunked);
  EXPECT_TRUE(cuda::plan_tiles(o.chunked_from, c, o).gdn_chunked);
  EXPECT_FALSE(cuda::plan_tiles(4096, c, {.chunked_from = 1 << 30}).gdn_chunked);
}

TEST(PrefillTiles, OptionsOverrideThePlan) {
  const ModelConfig c = model();
  cuda::TilePlan p = cuda::plan_tiles(8192, c, {.moe_bn = 64, .dense_bn = 64});
  EXPECT_EQ(p.dense_bn, 64);
  EXPECT_EQ(p.dense_bm, 128);  // with the tile's slots
  EXPECT_EQ(p.moe_bn, 64);
  EXPECT_EQ(p.moe_bm, 128);
  p = cuda::plan_tiles(8, c, {.moe_bn = 128, .dense_bn = 64, .gemm_bm = 256, .moe_bm = 256});
  EXPECT_EQ(p.dense_bn, 64);
  EXPECT_EQ(p.dense_bm, 256);
  EXPECT_EQ(p.moe_bn, 128);
  EXPECT_EQ(p.moe_bm, 256);
  EXPECT_EQ(p.logits_bm, 256);
  EXPECT_EQ(cuda::plan_tiles(8, c, {.gemm_bm = 128}).logits_bm, 128);
  EXPECT_EQ(cuda::TilePlan::logits_bn(64), 64);
  EXPECT_EQ(cuda::TilePlan::logits_bn(65), 128);
}

TEST(PrefillTiles, OptionsTheKernelsCannotTakeAreRefused) {
  EXPECT_NO_THROW(cuda::check_prefill_options({}));
  EXPECT_NO_THROW(cuda::check_prefill_options({.moe_bn = 96, .moe_bm = 128}));
  EXPECT_THROW(cuda::check_prefill_options({.chunk = 0}), Error);
  EXPECT_THROW(cuda::check_prefill_options({.step_below = 0}), Error);
  EXPECT_THROW(cuda::check_prefill_options({.chunked_from = 0}), Error);
  EXPECT_THROW(cuda::check_prefill_options({.moe_bn = 40}), Error);
  EXPECT_THROW(cuda::check_prefill_options({.dense_bn = 96}), Error);  // MoE tiles only
  EXPECT_THROW(cuda::check_prefill_options({.gemm_bm = 64}), Error);
  EXPECT_THROW(cuda::check_prefill_options({.moe_bn = 96, .moe_bm = 256}), Error);
}

}  // namespace
}  // namespace tern::test
