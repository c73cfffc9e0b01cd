// The Anthropic Messages API that Claude Code speaks: POST /v1/messages
// (whole and streamed with its event sequence) and
// /v1/messages/count_tokens, translated to the engine's request through the
// same chat rendering as the OpenAI endpoints; errors in Anthropic's shape.
#pragma once

#include "server/http_server.h"

namespace tern::server {

void add_anthropic_routes(HttpServer& s);

}  // namespace tern::server
