// tern bench --restore N,...: what a prompt of N tokens costs to prefill
// against loading its state back from the disk cache (engine/disk_cache.h),
// through the engine on any backend: the prefill without and with the disk
// tier (its snapshots' KV copied out as they are taken), then an
// exact repeat on a new engine (empty memory) over the same directory,
// loading from the page cache, and again after the files were dropped from it
// (posix_fadvise), as after a reboot. The repeat's tokens must equal the
// first run's.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tern::cli {

struct RestoreBenchOptions {
  std::vector<int64_t> lengths;
  int repeat = 3;  // loads per length (the median is reported); the prefill runs once
  uint64_t seed = 1;
  std::string dir;  // a subdirectory is made here for the entries (and removed); empty: $TMPDIR
};

// Prints a table; returns {"restore": rows}.
nlohmann::json run_restore_bench(Backend& be, const RestoreBenchOptions& o);

}  // namespace tern::cli
