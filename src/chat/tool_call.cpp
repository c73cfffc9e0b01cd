#include "chat/tool_call.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/json_text.h"

namespace tern {
namespace {

using ojson = nlohmann::ordered_json;

std::string_view trim_ws(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

std::optional<ojson> parse_json(std::string_view text) {
  try {
    return parse_json_text(text, "a tool call");
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::optional<ToolCall> parse_json_call(std::string_view block) {
  auto v = parse_json(block);
  if (!v || !v->is_object() || !(*v)["name"].is_string()) return std::nullopt;
  ToolCall call{(*v)["name"].get<std::string>()};
  const ojson& args = (*v)["arguments"];
  if (args.is_string()) {
    auto parsed = parse_json(args.get_ref<const std::string&>());
    if (!parsed || !parsed->is_object()) return std::nullopt;
    call.arguments = std::move(*parsed);
  } else if (args.is_object()) {
    call.arguments = args;
  } else if (!args.is_null()) {
    return std::nullopt;
  }
  return call;
}

}  // namespace

ToolSchemas::ToolSchemas(const ojson& tools) {
  if (!tools.is_array()) return;
  for (const ojson& tool : tools) {
    const ojson& fn = tool.is_object() && tool.contains("function") ? tool["function"] : tool;
    if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) continue;
    const ojson& params = fn.contains("parameters") ? fn["parameters"] : ojson();
    if (params.is_object() && params.contains("properties") && params["properties"].is_object())
      properties_[fn["name"].get<std::string>()] = params["properties"];
  }
}

const ojson* ToolSchemas::parameter(const std::string& function, const std::string& name) const {
  auto fn = properties_.find(function);
  if (fn == properties_.end()) return nullptr;
  auto p = fn->second.find(name);
  return p == fn->second.end() ? nullptr : &*p;
}

ojson typed_value(std::string_view text, const ojson* schema) {
  std::set<std::string> types;
  if (schema != nullptr) parameter_types(*schema, types);
  std::string_view t = trim_ws(text);
  auto allows = [&](const char* type) { return types.count(type) != 0; };
  if (types.empty()) {  // no schema: structured JSON stays structured
    auto v = parse_json(t);
    return v && (v->is_object() || v->is_array()) ? *v : ojson(std::string(text));
  }
  if (allows("null") && (t == "null" || t == "None")) return nullptr;
  if (allows("integer") || allows("number")) {
    auto v = parse_json(t);
    if (v && (v->is_number_integer() || (allows("number") && v->is_number()))) return *v;
  }
  if (allows("boolean")) {
    std::string lower(t);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](char c) { return char(std::tolower(c)); });
    if (lower == "true" || lower == "false") return lower == "true";
  }
  if (allows("object") || allows("array")) {
    auto v = parse_json(t);
    if (v && ((v->is_object() && allows("object")) || (v->is_array() && allows("array"))))
      return *v;
  }
  return std::string(text);
}

std::optional<ToolCall> parse_tool_call(std::string_view block, const ToolSchemas& schemas) {
  std::string_view s = trim_ws(block);
  if (s.starts_with("{")) return parse_json_call(s);
  constexpr std::string_view kFunction = "<function=", kParam = "<parameter=",
                             kParamEnd = "</parameter>", kFunctionEnd = "</function>";
  if (!s.starts_with(kFunction)) return std::nullopt;
  size_t gt = s.find('>');
  if (gt == std::string_view::npos) return std::nullopt;
  ToolCall call{std::string(trim_ws(s.substr(kFunction.size(), gt - kFunction.size())))};
  if (call.name.empty() || call.name.find('\n') != std::string::npos) return std::nullopt;
  s.remove_prefix(gt + 1);
  for (;;) {
    s = trim_ws(s);
    if (s.empty() || s == kFunctionEnd) return call;  // a missing </function> is tolerated
    if (!s.starts_with(kParam)) return std::nullopt;
    gt = s.find('>');
    if (gt == std::string_view::npos) return std::nullopt;
    std::string key(trim_ws(s.substr(kParam.size(), gt - kParam.size())));
    if (key.empty() || key.find('\n') != std::string::npos) return std::nullopt;
    s.remove_prefix(gt + 1);
    // The value ends at </parameter>, or, when that is missing, at the next tag.
    size_t end = s.find(kParamEnd), skip = kParamEnd.size();
    if (end == std::string_view::npos) {
      end = std::min(s.find(kParam), s.find(kFunctionEnd));
      skip = 0;
      if (end == std::string_view::npos) end = s.size();
    }
    std::string_view value = s.substr(0, end);
    // The template writes "<parameter=K>\n" value "\n</parameter>".
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    call.arguments[key] = typed_value(value, schemas.parameter(call.name, key));
    s.remove_prefix(std::min(s.size(), end + skip));
  }
}

}  // namespace tern
