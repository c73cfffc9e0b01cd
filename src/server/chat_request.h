// A conversation in the chat template's terms, as every chat-shaped API
// (chat completions, Anthropic messages, Responses) builds it, and the one
// path from it to the engine's Request: the tool choice, the system-message
// policy, rendering, and the constraint of the answer's format and tools.
#pragma once

#include <optional>
#include <string>

#include "server/api_request.h"

namespace tern::server {

// tool_choice, whatever API it came from.
struct ToolChoice {
  enum class Mode { automatic, none, required, function } mode = Mode::automatic;
  std::string function;  // Mode::function: the one to call
  bool parallel = true;  // more than one call per answer
};

struct ChatSpec {
  ojson messages = ojson::array();  // [{role, content, reasoning_content?, tool_calls?}]
  ojson tools;                      // OpenAI function tools, or null
  ToolChoice choice;
  std::optional<bool> thinking;  // the template's enable_thinking (unset: its default)
  // The answer's format (response_format, text.format, output_config.format):
  // answer and schema of a ConstraintRequest (Answer::free: none);
  // `format_field` names it in errors.
  grammar::ConstraintRequest format;
  std::string format_field = "response_format";
};

// The template takes one system message, first. Leading system (and
// developer) messages merge into one, joined by a blank line; a later one
// goes to the user side as a <system-reminder> text: appended to the user
// message right before it, else a user message of its own. Only what comes
// before decides, so each turn of a conversation renders its earlier turns
// as the previous turn did (prefix reuse).
ojson place_system_messages(const ojson& messages);

// Renders and tokenizes c into r: prompt, in_reasoning, tools, tool_calls,
// and the constraint of its format and tool choice.
void render_chat_into(Request& r, const ChatSpec& c, const ApiContext& ctx);
// An OpenAI response format ({type: text | json_object | json_schema, ...}, as
// chat completions' response_format or, flattened, the Responses API's
// text.format) into c.format; errors name `where`.
void parse_response_format(ChatSpec& c, const ojson& format, const std::string& where);

}  // namespace tern::server
