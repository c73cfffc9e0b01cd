// JSON text from outside (request bodies, tool-call arguments inside them,
// the model's own output) parsed with its nesting bounded: whatever walks the
// value later (the chat template, copies, error messages) recurses once per
// level, so a deep document must be refused while parsing.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace tern {

constexpr int kMaxJsonDepth = 64;

// tern::Error naming `what` when the text is not JSON or nests deeper than
// kMaxJsonDepth.
nlohmann::ordered_json parse_json_text(std::string_view text, const std::string& what);

}  // namespace tern
