// --cache-dir and --cache-disk (tern serve, tern chat): the session cache's
// disk tier (engine/disk_cache.h), off unless one of them is given.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "engine/engine.h"

namespace tern::cli {

struct DiskCacheFlags {
  std::string dir, size;
};

void add_disk_cache_options(CLI::App* cmd, DiskCacheFlags& f);
// Sets eo's disk tier when a flag asks for it: the directory (default
// default_cache_dir()), its budget (default 16G) and the checkpoint the
// entries are bound to (model_id, asked only then: it reads the files).
void apply_disk_cache(const DiskCacheFlags& f, const std::function<std::string()>& model_id,
                      EngineOptions& eo);

}  // namespace tern::cli
