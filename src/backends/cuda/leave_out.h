// The decode step's kernels by name, as tern bench --leave-out takes them (a
// name covers its instances in every layer). Plain C++, so the CLI can check
// the names before it needs a GPU.
#pragma once

#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"

namespace tern::cuda {

inline const std::vector<std::string>& step_kernel_names() {
  static const std::vector<std::string> names = {"embed", "gdn_in",    "gdn_step", "gdn_out",
                                                 "qkv",   "attention", "o_proj",   "route_up",
                                                 "down",  "lm_head"};
  return names;
}

// Fails with an Error naming the first unknown name and the known ones.
inline void check_step_kernel_names(const std::set<std::string>& names) {
  const auto& known = step_kernel_names();
  for (const std::string& n : names)
    if (std::find(known.begin(), known.end(), n) == known.end())
      fail("unknown step kernel '{}' (known: {})", n, fmt::join(known, ", "));
}

}  // namespace tern::cuda
