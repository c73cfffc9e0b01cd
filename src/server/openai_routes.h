// The OpenAI-compatible endpoints: POST /v1/chat/completions,
// /v1/completions, GET /v1/models, and llama.cpp's POST /tokenize and
// /detokenize.
#pragma once

#include "server/http_server.h"

namespace tern::server {

void add_openai_routes(HttpServer& s);

}  // namespace tern::server
