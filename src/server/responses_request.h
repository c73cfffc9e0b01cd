// OpenAI Responses request bodies (/v1/responses) validated and translated
// into the engine's Request: instructions, input items and a stored
// conversation (previous_response_id) as chat messages; function tools, with
// those inside namespaces (Codex's) flattened to one name each.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "server/openai_request.h"
#include "server/response_store.h"

namespace tern::server {

struct ResponsesRequest {
  Request req;
  std::string model;   // the name to report back
  ojson conversation;  // what a follow-up continues (without the instructions)
  bool stream = false, store = true;
  std::string previous;
  // Flattened tool names of namespaced functions: {namespace, name}.
  std::map<std::string, std::pair<std::string, std::string>> namespaced;
};

ResponsesRequest parse_responses_request(const ojson& body, const ApiContext& ctx,
                                         ResponseStore& store);

// How a function in namespace `ns` is named to the model (as Codex flattens it).
std::string flat_tool_name(const std::string& ns, const std::string& name);

}  // namespace tern::server
