// Qwen tool calls in generated text, as OpenAI-style calls with JSON
// arguments typed by the request's tool schemas.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
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

}  // namespace tern
