// OpenAI request bodies (chat completions, completions) validated and
// translated into the engine's Request: the conversation rendered with the
// Qwen chat template and tokenized, sampling and stop settings checked, the
// context length enforced. Every problem is an ApiError naming the field.
#pragma once

#include <string>

#include "server/chat_request.h"

namespace tern::server {

struct ApiRequest {
  Request req;
  std::string model;  // the name to report back
  bool stream = false, include_usage = false;
  bool echo = false;  // completions: the prompt's text before the completion
  std::string prompt_text;
};

ApiRequest parse_chat_request(const ojson& body, const ApiContext& ctx);
ApiRequest parse_completion_request(const ojson& body, const ApiContext& ctx);

// OpenAI's tool_choice and parallel_tool_calls, as chat completions
// ({"type": "function", "function": {"name"}}) and the Responses API
// ({"type": "function", "name"}) write them.
ToolChoice openai_tool_choice(const Fields& f);

}  // namespace tern::server
