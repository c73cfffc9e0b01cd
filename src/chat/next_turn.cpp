#include "chat/next_turn.h"

#include <algorithm>

#include "chat/chat_template.h"

namespace tern {

std::vector<int32_t> next_turn_prefix(nlohmann::ordered_json render, const Tokenizer& tok,
                                      const ParsedDelta& answer) {
  using ojson = nlohmann::ordered_json;
  const auto start = tok.token_id("<|im_start|>");
  if (!start) return {};
  ojson msg = {{"role", "assistant"}, {"content", answer.content}};
  if (!answer.reasoning.empty()) msg["reasoning_content"] = answer.reasoning;
  if (!answer.tool_calls.empty()) {
    msg["tool_calls"] = ojson::array();
    for (const ToolCall& c : answer.tool_calls)
      msg["tool_calls"].push_back(
          {{"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  render["messages"].push_back(std::move(msg));
  // What follows decides how the template renders the answer (a turn after the
  // last user query keeps its think block), so guess like an agent loop: tool
  // results after tool calls, else the user.
  render["messages"].push_back(
      {{"role", answer.tool_calls.empty() ? "user" : "tool"}, {"content", ""}});
  render["add_generation_prompt"] = false;
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(render_chat(render));
  } catch (const ChatTemplateError&) {
    return {};
  }
  const auto last = std::find(ids.rbegin(), ids.rend(), *start);
  ids.resize(size_t(ids.rend() - last));  // through it (none: empty)
  return ids;
}

}  // namespace tern
