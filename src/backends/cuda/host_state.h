// Host-side state of the launchers (host_state.cpp): the device's SM count,
// the split policy of launches too small to fill it, and the counters of the
// code paths the launchers took.
#pragma once

#include <vector>

namespace tern::cuda {

// The code paths the launchers took, counted at launch (so at capture for the
// step graphs): the tests assert that the real model's widths run the
// tensor-core tiles and the router feed, not only the SIMT fallbacks.
enum class KernelPath : int {
  gemv_tile,        // dense GEMV on tensor cores (plain, norm or gated staging)
  gemv_tile_gated,  // ... the GDN out-projection's gated-norm staging
  gemv_simt,        // dense GEMV, SIMT fallback
  gemv_feed,        // a tile GEMV feeding the next router's logits
  route_fed,        // routing + gate/up in one launch from fed logits
  route_unfed,      // router launch, then gate/up
  up_tile,          // experts' gate/up on tensor cores (fed or not)
  up_simt,
  down_tile,  // experts' down on tensor cores
  down_simt,
  gemv_rows,  // a tile GEMV over the rows of a step (rows.h), each tile read once
  count
};
void note_path(KernelPath p);
// The current device's SM count (queried once; throws tern::Error if the
// query fails).
int sm_count();
// Parts to cut a launch of `blocks` blocks into so that it fills the GPU: 1
// when the blocks already cover every SM, else about two blocks an SM, at
// most `most` (the work's own limits: its length, the scratch it may use).
int fill_splits(int blocks, int most);
// Launches of each path since the last reset (KernelPath order).
std::vector<long> path_counts();
void reset_path_counts();

}  // namespace tern::cuda
