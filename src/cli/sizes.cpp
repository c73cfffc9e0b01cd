#include "cli/sizes.h"

#include <cctype>
#include <cmath>

#include "core/error.h"

namespace tern::cli {

size_t parse_size(const std::string& s, const std::string& flag) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    fail("{} '{}' is not a size (e.g. 4G, 512M, 0)", flag, s);
  }
  std::string unit = s.substr(used);
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  const double scale = unit.empty()  ? 1
                       : unit == "K" ? 1024.0
                       : unit == "M" ? 1048576.0
                       : unit == "G" ? 1073741824.0
                       : unit == "T" ? 1099511627776.0
                                     : -1;
  if (scale < 0 || !(v >= 0) || !std::isfinite(v * scale))
    fail("{} '{}' is not a size (e.g. 4G, 512M, 0)", flag, s);
  return size_t(v * scale);
}

}  // namespace tern::cli
