// A checkpoint's identity for the disk cache (engine/disk_cache.h): state
// computed from one checkpoint must never be restored under another. The
// hash covers config.json and the shard index whole, and per weights file
// its name, size, modification time and first and last MiB: hashing 20 GB
// whole would add seconds to every start, and a file changed in place keeps
// neither its mtime nor, in practice, its ends. Copying a checkpoint (new
// mtimes) makes it a new one: its cache starts empty.
#pragma once

#include <string>

namespace tern {

// 16 hex digits.
std::string model_fingerprint(const std::string& dir);

}  // namespace tern
