// Anthropic Messages request bodies (/v1/messages, count_tokens) validated
// and translated into the engine's Request: system text and messages in the
// chat template's terms, tools and tool_choice, thinking, the answer's
// format (output_config.format), the context checked in Anthropic's wording.
#pragma once

#include <string>

#include "server/chat_request.h"

namespace tern::server {

struct MessagesRequest {
  Request req;
  std::string model;  // the name to report back
  bool stream = false;
};

// count_only: the prompt alone (count_tokens; no max_tokens needed).
MessagesRequest parse_messages_request(const ojson& body, const ApiContext& ctx, bool count_only);

}  // namespace tern::server
