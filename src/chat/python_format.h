// The few Python behaviours that Hugging Face's chat-template rendering
// (Jinja2 under transformers) shows in its output: str.strip(), str() of
// JSON-derived values and json.dumps(ensure_ascii=False).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace tern::py {

// str.strip() with no argument: removes Unicode whitespace at both ends.
std::string_view strip(std::string_view s);

// str(v) for the Python value that json.loads gives for v.
std::string str(const nlohmann::ordered_json& v);

// json.dumps(v, ensure_ascii=False): ", " and ": " separators, keys in order.
std::string json_dumps(const nlohmann::ordered_json& v);

// repr() of a float (shortest round-trip digits, Python's layout).
std::string float_repr(double d);

}  // namespace tern::py
