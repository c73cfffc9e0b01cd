#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace tern {

void check_failed(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "tern: internal error: %s (%s:%d)\n", cond, file, line);
  std::abort();
}

}  // namespace tern
