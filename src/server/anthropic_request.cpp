#include "server/anthropic_request.h"

#include <spdlog/spdlog.h>

namespace tern::server {

namespace {

// Claude Code opens its system prompt with a line whose cch= hash changes
// with every request: kept, it would end prefix reuse at the first tokens.
constexpr std::string_view kBillingHeader = "x-anthropic-billing-header:";

std::string without_billing_header(std::string text) {
  if (!text.starts_with(kBillingHeader)) return text;
  if (first_time("billing header"))
    spdlog::info(
        "anthropic: the x-anthropic-billing-header line of system prompts is dropped "
        "(its per-request hash would defeat prefix reuse)");
  const size_t eol = text.find('\n');
  return eol == std::string::npos ? "" : text.substr(eol + 1);
}

// The system field: a string or a list of text blocks (the billing header
// block dropped).
std::string system_text(const ojson& sys) {
  if (!sys.is_array()) return without_billing_header(parts_text(sys, "system", {"text"}));
  std::string out;
  for (size_t i = 0; i < sys.size(); ++i)
    out +=
        without_billing_header(parts_text(ojson::array({sys[i]}), element("system", i), {"text"}));
  return out;
}

// Anthropic messages as the chat template's: tool_result blocks become tool
// messages (before the user's text), tool_use blocks tool calls, thinking
// blocks the assistant's reasoning; system messages in the list (Claude Code
// sends them) go where place_system_messages puts them.
ojson chat_messages(const Fields& f) {
  ojson out = ojson::array();
  if (const ojson* sys = f.get("system"))
    out.push_back({{"role", "system"}, {"content", system_text(*sys)}});
  const ojson* msgs = f.array("messages");
  if (!msgs || msgs->empty()) bad_request("messages", "'messages' must be a non-empty list");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const Fields m((*msgs)[i], element("messages", i));
    const std::string role = m.string("role").value_or("");
    if (role != "user" && role != "assistant" && role != "system")
      bad_request(m.name("role"), "Unexpected role \"{}\": '{}' must be user or assistant", role,
                  m.name("role"));
    const ojson* content = m.get("content");
    if (!content) bad_request(m.name("content"), "'{}' is required", m.name("content"));
    if (role == "system") {
      out.push_back({{"role", "system"}, {"content", system_text(*content)}});
      continue;
    }
    if (content->is_string()) {
      out.push_back({{"role", role}, {"content", content->get<std::string>()}});
      continue;
    }
    if (!content->is_array())
      bad_request(m.name("content"), "'{}' must be a string or a list of content blocks",
                  m.name("content"));
    std::string text, reasoning;
    ojson calls = ojson::array();
    for (size_t j = 0; j < content->size(); ++j) {
      const std::string where = element(m.name("content"), j);
      const Fields b((*content)[j], where);
      const std::string type = b.string("type").value_or("");
      if (type == "text") {
        text += b.string("text").value_or("");
      } else if (type == "tool_result" && role == "user") {
        const ojson* c = b.get("content");
        out.push_back(
            {{"role", "tool"}, {"content", c ? parts_text(*c, b.name("content"), {"text"}) : ""}});
      } else if (type == "tool_use" && role == "assistant") {
        const ojson* input = b.object("input");
        calls.push_back({{"function",
                          {{"name", b.string("name").value_or("")},
                           {"arguments", input ? *input : ojson::object()}}}});
      } else if (type == "thinking" && role == "assistant") {
        reasoning += b.string("thinking").value_or("");
      } else if (type == "redacted_thinking" && role == "assistant") {
        // Encrypted reasoning of another model: nothing to render.
      } else if (type == "image" || type == "document") {
        bad_request(b.name("type"), "'{}': {} blocks are not supported (this model takes text)",
                    b.name("type"), type);
      } else {
        bad_request(b.name("type"), "'{}': a {} message cannot hold a '{}' block", b.name("type"),
                    role, type);
      }
    }
    if (role == "user" && text.empty() && !out.empty() && out.back()["role"] == "tool") continue;
    ojson msg = {{"role", role}, {"content", text}};
    if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
    if (!calls.empty()) msg["tool_calls"] = tool_calls_of(calls, m.name("content"));
    out.push_back(std::move(msg));
  }
  return out;
}

// Client tools (no type, or "custom") as OpenAI function tools; Anthropic's
// server tools (web search, code execution, ...) are skipped.
ojson function_tools(const ojson& tools) {
  ojson t = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Fields tool(tools[i], element("tools", i));
    const std::string type = tool.string("type").value_or("custom");
    if (type != "custom") {
      warn_once("anthropic tool type " + type,
                "anthropic: tools of type '{}' are skipped (client tools only)", type);
      continue;
    }
    const auto name = tool.string("name");
    if (!name || name->empty())
      bad_request(tool.name("name"), "'{}' is required", tool.name("name"));
    ojson fn = {{"name", *name}, {"description", tool.string("description").value_or("")}};
    if (const ojson* schema = tool.object("input_schema")) fn["parameters"] = *schema;
    t.push_back({{"type", "function"}, {"function", fn}});
  }
  return t;
}

ToolChoice anthropic_tool_choice(const Fields& f) {
  using Mode = ToolChoice::Mode;
  ToolChoice c;
  const ojson* tc = f.object("tool_choice");
  if (!tc) return c;
  const Fields choice(*tc, "tool_choice");
  const std::string type = choice.string("type").value_or("auto");
  if (type == "any") {
    c.mode = Mode::required;
  } else if (type == "tool") {
    c.mode = Mode::function;
    c.function = choice.string("name").value_or("");
    if (c.function.empty()) bad_request("tool_choice.name", "'tool_choice.name' is required");
  } else if (type == "none") {
    c.mode = Mode::none;
  } else if (type != "auto") {
    bad_request("tool_choice.type", "'tool_choice.type' must be auto, any, tool or none");
  }
  c.parallel = !choice.boolean("disable_parallel_tool_use").value_or(false);
  return c;
}

ChatSpec chat_spec(const Fields& f) {
  ChatSpec c;
  c.messages = chat_messages(f);
  if (const ojson* tools = f.array("tools"); tools && !tools->empty()) {
    const ojson fns = function_tools(*tools);
    if (!fns.empty()) c.tools = parse_tools(fns, "tools");
  }
  c.choice = anthropic_tool_choice(f);
  c.thinking = false;  // Anthropic's default: no extended thinking
  if (const ojson* th = f.object("thinking")) {
    const Fields t(*th, "thinking");
    const std::string type = t.string("type").value_or("");
    if (type != "enabled" && type != "disabled" && type != "adaptive")
      bad_request("thinking.type", "'thinking.type' must be enabled, adaptive or disabled");
    c.thinking = type != "disabled";  // adaptive: enabled, without a budget
    if (type == "enabled") t.integer("budget_tokens", 1, INT32_MAX);
  }
  if (const ojson* oc = f.object("output_config")) {
    // effort has no counterpart here; format constrains the answer.
    if (const ojson* fmt = Fields(*oc, "output_config").object("format")) {
      const Fields format(*fmt, "output_config.format");
      const std::string type = format.string("type").value_or("");
      if (type != "json_schema")
        bad_request("output_config.format.type", "'output_config.format.type' must be json_schema");
      parse_response_format(c, *fmt, "output_config.format");
    }
  }
  return c;
}

}  // namespace

MessagesRequest parse_messages_request(const ojson& body, const ApiContext& ctx, bool count_only) {
  const Fields f(body, "");
  MessagesRequest m;
  m.model = check_model(f, ctx);
  render_chat_into(m.req, chat_spec(f), ctx);
  if (count_only) return m;
  const auto max = f.integer("max_tokens", 1, INT32_MAX);
  if (!max) bad_request("max_tokens", "'max_tokens' is required");
  m.stream = f.boolean("stream").value_or(false);
  m.req.sampling = parse_sampling(f);
  m.req.stop = parse_stop(f, "stop_sequences");
  fit_context(m.req, max, "max_tokens", ctx, ErrorStyle::anthropic);
  return m;
}

}  // namespace tern::server
