#include "core/json_file.h"

#include <fstream>

#include "core/error.h"

namespace tern {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot open {}", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
}

}  // namespace tern
