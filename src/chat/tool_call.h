// Qwen tool calls in generated text, as OpenAI-style calls with JSON
// arguments typed by the request's tool schemas.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tern {

struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();

  // OpenAI's "arguments" field: the arguments as a JSON string.
  std::string arguments_json() const { return arguments.dump(); }
};

// Parameter schemas of a request's "tools" list (OpenAI format:
// [{"type": "function", "function": {"name", "parameters": {...}}}]).
class ToolSchemas {
 public:
  ToolSchemas() = default;
  explicit ToolSchemas(const nlohmann::ordered_json& tools);
  // The JSON schema of a function's parameter, or nullptr.
  const nlohmann::ordered_json* parameter(const std::string& function,
                                          const std::string& name) const;

 private:
  std::unordered_map<std::string, nlohmann::ordered_json> properties_;
};

// Parses the text between <tool_call> and </tool_call>: the XML-like form
// the Qwen3.5 template asks for (<function=NAME><parameter=P>value</parameter>
// ...</function>), or Qwen3's JSON form {"name": ..., "arguments": {...}}.
// nullopt when it is neither.
std::optional<ToolCall> parse_tool_call(std::string_view block, const ToolSchemas& schemas);

// A parameter's text as a JSON value of the schema's type; text that does not
// fit the schema stays a string.
nlohmann::ordered_json typed_value(std::string_view text, const nlohmann::ordered_json* schema);

// The JSON types typed_value reads a parameter as: the schema's "type" (a
// name or a list) and those of its anyOf/oneOf branches. Inline: the tool-call
// grammar (grammar/tool_grammar.cpp) writes exactly what this reads.
inline void parameter_types(const nlohmann::ordered_json& schema, std::set<std::string>& types) {
  if (!schema.is_object()) return;
  if (auto t = schema.find("type"); t != schema.end()) {
    if (t->is_string()) types.insert(t->get<std::string>());
    if (t->is_array())
      for (const nlohmann::ordered_json& x : *t)
        if (x.is_string()) types.insert(x.get<std::string>());
  }
  for (const char* key : {"anyOf", "oneOf"})
    if (auto alt = schema.find(key); alt != schema.end() && alt->is_array())
      for (const nlohmann::ordered_json& s : *alt) parameter_types(s, types);
}

}  // namespace tern
