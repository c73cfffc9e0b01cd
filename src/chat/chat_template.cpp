#include "chat/chat_template.h"

#include <optional>

#include "chat/python_format.h"
#include "core/error.h"
#include "core/json_text.h"

namespace tern {
namespace {

using ojson = nlohmann::ordered_json;

// Copied byte for byte from qwen3.5.jinja.
constexpr std::string_view kToolsHeader =
    "# Tools\n\nYou have access to the following functions:\n\n<tools>";
// clang-format off
constexpr std::string_view kToolsInstructions =
    "\n\n"
    "If you choose to call a function ONLY reply in the following format with NO suffix:\n"
    "\n"
    "<tool_call>\n"
    "<function=example_function_name>\n"
    "<parameter=example_parameter_1>\n"
    "value_1\n"
    "</parameter>\n"
    "<parameter=example_parameter_2>\n"
    "This is the value for the second parameter\n"
    "that can span\n"
    "multiple lines\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call>\n"
    "\n"
    "<IMPORTANT>\n"
    "Reminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n"
    "</IMPORTANT>";
// clang-format on

[[noreturn]] void reject(const std::string& message) {
  throw ChatTemplateError(message);
}

// `obj.key` in Jinja: nullptr stands for "undefined".
const ojson* attr(const ojson* obj, const char* key) {
  if (obj == nullptr || !obj->is_object()) return nullptr;
  auto it = obj->find(key);
  return it == obj->end() ? nullptr : &*it;
}

bool truthy(const ojson* v) {
  if (v == nullptr || v->is_null()) return false;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number()) return v->get<double>() != 0;
  if (v->is_string()) return !v->get_ref<const std::string&>().empty();
  return !v->empty();  // arrays and objects
}

// `message.role == name`.
bool role_is(const ojson& message, std::string_view name) {
  const ojson* role = attr(&message, "role");
  return role != nullptr && role->is_string() && role->get_ref<const std::string&>() == name;
}

// Python's `needle in container` for the content item tests.
bool contains(const ojson& item, const std::string& needle) {
  if (item.is_object()) return item.contains(needle);
  if (item.is_string()) return item.get_ref<const std::string&>().find(needle) != std::string::npos;
  if (item.is_array()) {
    for (const ojson& e : item)
      if (e == needle) return true;
    return false;
  }
  reject("Unexpected item type in content.");
}

bool type_is(const ojson& item, std::string_view type) {
  const ojson* t = attr(&item, "type");
  return t != nullptr && t->is_string() && t->get_ref<const std::string&>() == type;
}

std::string strip(std::string_view s) {
  return std::string(py::strip(s));
}

std::string_view rstrip_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

std::string_view lstrip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}

class Renderer {
 public:
  explicit Renderer(bool add_vision_id) : add_vision_id_(add_vision_id) {}

  // The template's render_content macro.
  std::string content(const ojson* c, bool do_vision_count, bool is_system = false) {
    if (c == nullptr || c->is_null()) return "";
    if (c->is_string()) return c->get<std::string>();
    if (!c->is_array()) reject("Unexpected content type.");
    std::string out;
    for (const ojson& item : *c) {
      if (contains(item, "image") || contains(item, "image_url") || type_is(item, "image")) {
        out += vision(is_system, do_vision_count, "images", images_, "Picture ", "<|image_pad|>");
      } else if (contains(item, "video") || type_is(item, "video")) {
        out += vision(is_system, do_vision_count, "videos", videos_, "Video ", "<|video_pad|>");
      } else if (contains(item, "text")) {
        if (const ojson* text = attr(&item, "text")) out += py::str(*text);
      } else {
        reject("Unexpected item type in content.");
      }
    }
    return out;
  }

 private:
  std::string vision(bool is_system, bool do_count, const char* what, int& count, const char* label,
                     const char* pad) const {
    if (is_system) reject(std::string("System message cannot contain ") + what + ".");
    if (do_count) ++count;
    std::string out = add_vision_id_ ? label + std::to_string(count) + ": " : "";
    return out + "<|vision_start|>" + pad + "<|vision_end|>";
  }

  bool add_vision_id_;
  int images_ = 0, videos_ = 0;
};

// Tool-call arguments as the object the template iterates.
ojson arguments_object(const ojson& args) {
  if (args.is_object()) return args;
  if (args.is_string()) {
    try {
      ojson parsed = parse_json_text(args.get_ref<const std::string&>(), "arguments");
      if (parsed.is_object()) return parsed;
    } catch (const Error&) {
    }
  }
  reject("Tool call arguments must be a JSON object or a string holding one.");
}

void render_tool_calls(const ojson& calls, bool has_content, std::string& out) {
  if (!truthy(&calls) || calls.is_object() || !(calls.is_array() || calls.is_string())) return;
  if (calls.is_string()) reject("Tool calls must be a list of objects.");
  bool first = true;
  for (const ojson& call : calls) {
    const ojson* fn = attr(&call, "function") ? attr(&call, "function") : &call;
    const ojson* name = attr(fn, "name");
    if (name == nullptr || !name->is_string()) reject("Tool call has no function name.");
    out += first ? (has_content ? "\n\n<tool_call>\n<function=" : "<tool_call>\n<function=")
                 : "\n<tool_call>\n<function=";
    out += name->get_ref<const std::string&>() + ">\n";
    if (const ojson* args = attr(fn, "arguments")) {
      ojson arguments = arguments_object(*args);
      for (const auto& [key, value] : arguments.items()) {
        out += "<parameter=" + key + ">\n";
        out += value.is_object() || value.is_array() ? py::json_dumps(value) : py::str(value);
        out += "\n</parameter>\n";
      }
    }
    out += "</function>\n</tool_call>";
    first = false;
  }
}

void render_assistant(const ojson& message, std::string content, bool after_last_query,
                      std::string& out) {
  std::string reasoning;
  const ojson* rc = attr(&message, "reasoning_content");
  if (rc != nullptr && rc->is_string()) {
    reasoning = rc->get<std::string>();
  } else if (size_t end = content.find("</think>"); end != std::string::npos) {
    std::string_view before = rstrip_newlines(std::string_view(content).substr(0, end));
    size_t open = before.rfind("<think>");
    if (open != std::string_view::npos) before.remove_prefix(open + 7);
    reasoning = lstrip_newlines(before);
    content = lstrip_newlines(std::string_view(content).substr(content.rfind("</think>") + 8));
  }
  out += "<|im_start|>assistant\n";
  if (after_last_query) out += "<think>\n" + strip(reasoning) + "\n</think>\n\n";
  out += content;
  if (const ojson* calls = attr(&message, "tool_calls"))
    render_tool_calls(*calls, !py::strip(content).empty(), out);
  out += "<|im_end|>\n";
}

}  // namespace

std::string render_chat(const ojson& request) {
  const ojson* messages = attr(&request, "messages");
  if (!truthy(messages)) reject("No messages provided.");
  if (!messages->is_array()) reject("messages must be a list.");
  // The template iterates any non-empty "tools" that is not a mapping; a
  // string's characters are no tool list, so that case is refused.
  const ojson* tools = attr(&request, "tools");
  if (truthy(tools) && tools->is_string()) reject("tools must be a list.");
  bool has_tools = truthy(tools) && tools->is_array();
  const ojson* thinking = attr(&request, "enable_thinking");
  Renderer render(truthy(attr(&request, "add_vision_id")));
  const ojson& msgs = *messages;
  const size_t n = msgs.size();

  std::string out;
  bool first_is_system = role_is(msgs[0], "system");
  if (has_tools) {
    out += "<|im_start|>system\n";
    out += kToolsHeader;
    for (const ojson& tool : *tools) {
      out += '\n';  // appended apart: GCC 12 warns falsely (-Wrestrict) on "\n" + string
      out += py::json_dumps(tool);
    }
    out += "\n</tools>";
    out += kToolsInstructions;
    if (first_is_system) {
      std::string sys = strip(render.content(attr(&msgs[0], "content"), false, true));
      if (!sys.empty()) out += "\n\n" + sys;
    }
    out += "<|im_end|>\n";
  } else if (first_is_system) {
    out += "<|im_start|>system\n" + strip(render.content(attr(&msgs[0], "content"), false, true)) +
           "<|im_end|>\n";
  }

  // The last user message that is not just tool responses: assistant turns
  // after it keep their reasoning.
  std::optional<size_t> last_query;
  for (size_t i = n; i-- > 0 && !last_query;) {
    if (!role_is(msgs[i], "user")) continue;
    std::string c = strip(render.content(attr(&msgs[i], "content"), false));
    if (!(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) last_query = i;
  }
  if (!last_query) reject("No user query found in messages.");

  for (size_t i = 0; i < n; ++i) {
    const ojson& m = msgs[i];
    std::string content = strip(render.content(attr(&m, "content"), true));
    if (role_is(m, "system")) {
      if (i != 0) reject("System message must be at the beginning.");
    } else if (role_is(m, "user")) {
      out += "<|im_start|>user\n" + content + "<|im_end|>\n";
    } else if (role_is(m, "assistant")) {
      render_assistant(m, std::move(content), i > *last_query, out);
    } else if (role_is(m, "tool")) {
      if (i > 0 && !role_is(msgs[i - 1], "tool")) out += "<|im_start|>user";
      out += "\n<tool_response>\n" + content + "\n</tool_response>";
      if (i + 1 == n || !role_is(msgs[i + 1], "tool")) out += "<|im_end|>\n";
    } else {
      reject("Unexpected message role.");
    }
  }

  if (truthy(attr(&request, "add_generation_prompt"))) {
    out += "<|im_start|>assistant\n";
    bool thinking_off = thinking != nullptr && thinking->is_boolean() && !thinking->get<bool>();
    out += thinking_off ? "<think>\n\n</think>\n\n" : "<think>\n";
  }
  return out;
}

bool is_qwen35_chat_template(std::string_view source) {
  // FNV-1a of qwen3.5.jinja: any other text may render differently.
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : source) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  return h == 0xf07c510f47fbaca0ull;
}

}  // namespace tern
