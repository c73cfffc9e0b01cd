#include "server/chat_request.h"

#include "chat/chat_template.h"
#include "chat/next_turn.h"
#include "chat/output_parser.h"
#include "chat/prompt.h"
#include "core/error.h"

namespace tern::server {

namespace {

std::string reminder(const std::string& text) {
  return "<system-reminder>\n" + text + "\n</system-reminder>";
}

}  // namespace

ojson place_system_messages(const ojson& messages) {
  ojson out = ojson::array();
  std::optional<std::string> leading;
  bool after_user = false;  // the previous message was a user message (or a reminder)
  for (const ojson& m : messages) {
    const std::string role = m.value("role", ""), text = m.value("content", "");
    if (role != "system") {
      out.push_back(m);
      after_user = role == "user";
    } else if (out.empty()) {
      leading = !leading || leading->empty() ? text
                : text.empty()               ? *leading
                                             : *leading + "\n\n" + text;
    } else if (after_user) {
      std::string content = out.back().value("content", "");
      content += '\n';
      content += reminder(text);
      out.back()["content"] = std::move(content);
    } else {
      out.push_back({{"role", "user"}, {"content", reminder(text)}});
      after_user = true;
    }
  }
  if (leading) out.insert(out.begin(), ojson{{"role", "system"}, {"content", *leading}});
  return out;
}

void parse_response_format(ChatSpec& c, const ojson& format, const std::string& where) {
  c.format_field = where;
  try {
    grammar::response_format(format, where, c.format);
  } catch (const Error& e) {
    bad_request(where, "{}", e.what());
  }
}

void render_chat_into(Request& r, const ChatSpec& c, const ApiContext& ctx) {
  using Mode = ToolChoice::Mode;
  const bool have_tools = !c.tools.is_null() && !c.tools.empty();
  const bool calls = have_tools && c.choice.mode != Mode::none;
  if ((c.choice.mode == Mode::required || c.choice.mode == Mode::function) && !have_tools)
    bad_request("tool_choice", "tool_choice '{}' needs a non-empty tools list",
                c.choice.mode == Mode::required ? "required" : c.choice.function);
  ChatPrompt p;
  try {
    p = render_prompt(*ctx.tok, place_system_messages(c.messages), c.thinking,
                      calls ? c.tools : ojson(nullptr));
  } catch (const ChatTemplateError& e) {
    bad_request("messages", "{}", e.what());
  }
  r.prompt = std::move(p.ids);
  r.in_reasoning = p.in_reasoning;
  r.next_turn = [render = std::move(p.render), tok = ctx.tok](const ParsedDelta& answer) {
    return next_turn_prefix(render, *tok, answer);
  };
  r.tools = c.tools;
  r.tool_calls = calls;  // without tools, <tool_call> in the answer is text
  using Tools = grammar::ConstraintRequest::Tools;
  grammar::ConstraintRequest want = c.format;
  if (calls) {
    want.tools = c.choice.mode == Mode::required   ? Tools::required
                 : c.choice.mode == Mode::function ? Tools::named
                                                   : Tools::automatic;
    want.tool_list = c.tools;
    want.function = c.choice.function;
    want.parallel = c.choice.parallel;
  }
  constrain(
      r, want,
      want.answer != grammar::ConstraintRequest::Answer::free ? c.format_field : "tool_choice",
      ctx);
}

}  // namespace tern::server
