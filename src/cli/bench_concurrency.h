// tern bench --concurrency N,...: N requests at once through the engine's
// scheduler (continuous batching), each a prompt of `context` random tokens
// then `gen` decoded tokens. Aggregate and per-request decode speed are
// measured over the stretch where all N decode together (from the last one's
// first token to the first one's end), with the gaps between tokens there;
// then the time to first token of one more request of the same context
// while N - 1 others decode, against that request alone.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/backend.h"

namespace tern::cli {

struct ConcurrencyBenchOptions {
  std::vector<int64_t> streams, contexts;
  int gen = 128;
  uint64_t seed = 1;
};

// Prints a table; returns {"concurrency": rows}.
nlohmann::json run_concurrency_bench(Backend& be, const ConcurrencyBenchOptions& o);

}  // namespace tern::cli
