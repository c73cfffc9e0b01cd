// The Qwen3.5/3.6 chat format, rendered natively: the same text that
// transformers' apply_chat_template gives with the Qwen3.5 template
// (tests/data/chat-template/qwen3.5.jinja), without a Jinja engine.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "core/error.h"

namespace tern {

// A conversation the template rejects; the message is the template's own
// where it raises one ("System message must be at the beginning.", ...).
class ChatTemplateError : public Error {
 public:
  using Error::Error;
};

// Renders {"messages": [...], "tools": [...]?, "add_generation_prompt": bool?,
// "enable_thinking": bool?, "add_vision_id": bool?}. Parse requests with
// nlohmann::ordered_json: the tool schemas are written with their keys in the
// given order. Tool-call "arguments" may be an object or a JSON string holding
// one (as OpenAI clients send it); the string is parsed first.
std::string render_chat(const nlohmann::ordered_json& request);

// Whether a checkpoint's chat template source is exactly the Qwen3.5 one
// that render_chat implements (callers warn when it is not).
bool is_qwen35_chat_template(std::string_view source);

}  // namespace tern
