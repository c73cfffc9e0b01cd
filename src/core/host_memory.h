// The host's memory as Linux reports it.
#pragma once

#include <cstddef>

namespace tern {

// /proc/meminfo's MemAvailable in bytes (0 where unreadable).
size_t host_memory_available();

}  // namespace tern
