#include "core/host_memory.h"

#include <cstdio>

namespace tern {

size_t host_memory_available() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  std::fclose(f);
  return size_t(kb) * 1024;
}

}  // namespace tern
