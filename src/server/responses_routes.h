// The OpenAI Responses API that Codex speaks: POST /v1/responses (whole and
// streamed with its events, each with a sequence_number), input items
// (messages, function calls and their outputs, reasoning), function tools
// (other tool types ignored with a warning), and store / previous_response_id
// through a bounded in-memory store.
#pragma once

#include "server/http_server.h"
#include "server/response_store.h"

namespace tern::server {

void add_responses_routes(HttpServer& s, ResponseStore& store);

}  // namespace tern::server
