#include "cli/cache_options.h"

#include "cli/sizes.h"
#include "engine/disk_cache.h"

namespace tern::cli {

void add_disk_cache_options(CLI::App* cmd, DiskCacheFlags& f) {
  cmd->add_option("--cache-dir", f.dir,
                  "Keep sessions on disk in this directory too (created 0700), across restarts "
                  "(default with --cache-disk: $XDG_CACHE_HOME/tern/sessions or "
                  "~/.cache/tern/sessions)");
  cmd->add_option("--cache-disk", f.size,
                  "Disk cache budget, e.g. 16G (the default with --cache-dir); least recently "
                  "used entries go first");
}

void apply_disk_cache(const DiskCacheFlags& f, const std::function<std::string()>& model_id,
                      EngineOptions& eo) {
  if (f.dir.empty() && f.size.empty()) return;
  eo.cache_dir = f.dir.empty() ? default_cache_dir() : f.dir;
  eo.cache_disk = parse_size(f.size.empty() ? "16G" : f.size, "--cache-disk");
  eo.model_id = model_id();
}

}  // namespace tern::cli
