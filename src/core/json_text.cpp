#include "core/json_text.h"

#include "core/error.h"

namespace tern {

nlohmann::ordered_json parse_json_text(std::string_view text, const std::string& what) {
  using ojson = nlohmann::ordered_json;
  const auto depth = [&what](int d, ojson::parse_event_t, ojson&) {
    if (d > kMaxJsonDepth) fail("{} nests deeper than {} levels", what, kMaxJsonDepth);
    return true;
  };
  try {
    return ojson::parse(text, depth);
  } catch (const ojson::exception& e) {
    fail("{} is not valid JSON: {}", what, e.what());
  }
}

}  // namespace tern
