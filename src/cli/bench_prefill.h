// tern bench --prefill (CUDA): prompt processing timed to the last token's
// logits, by prompt length; kept apart from the decode part of cmd_bench.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/config.h"

namespace tern::cuda {
class CudaBackend;
}

namespace tern::cli {

// FLOPs of one prompt of L tokens after pos0 cached ones, by phase as the
// backend's PrefillProfile splits them (the routers count as MoE GEMMs, the
// lm_head of the last token as dense).
struct PrefillFlops {
  double moe = 0, dense = 0, gdn = 0, attention = 0;
  double total() const { return moe + dense + gdn + attention; }
};
PrefillFlops prefill_flops(const ModelConfig& c, int64_t L, int64_t pos0 = 0);

struct PrefillBenchOptions {
  std::vector<int64_t> lengths;
  int repeat = 3;
  uint64_t seed = 1;
  bool split = false;  // one more run per length with the per-phase split
  std::string plot;
};

// Runs the sweep, printing a table; returns the JSON fields it adds.
nlohmann::json run_prefill_bench(cuda::CudaBackend& be, const PrefillBenchOptions& o);

}  // namespace tern::cli
