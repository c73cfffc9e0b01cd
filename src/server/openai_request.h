// OpenAI request bodies (chat completions, completions) validated and
// translated into the engine's Request: the conversation rendered with the
// Qwen chat template and tokenized, sampling and stop settings checked, the
// context length enforced. Every problem is an ApiError naming the field.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "engine/request.h"
#include "grammar/request.h"
#include "server/json_fields.h"
#include "tokenizer/tokenizer.h"

namespace tern::server {

// What the parsers need to know of the server.
struct ApiContext {
  const Tokenizer* tok = nullptr;
  std::string model;     // the served model name
  int64_t ctx_size = 0;  // prompt + completion tokens at most
  // Structured outputs: compiled grammars over tok's vocabulary (nullptr:
  // requests that need a constraint get a 400), and the tokens that end a
  // completion (the constraint allows them where its grammar may end).
  grammar::GrammarCache* grammars = nullptr;
  std::vector<int32_t> end_ids;
};

struct ApiRequest {
  Request req;
  bool stream = false, include_usage = false;
  bool echo = false;  // completions: the prompt's text before the completion
  std::string prompt_text;
};

ApiRequest parse_chat_request(const ojson& body, const ApiContext& ctx);
ApiRequest parse_completion_request(const ojson& body, const ApiContext& ctx);

// The pieces the APIs share, for the other protocols too.
// "model", when given, must be the served name (404 otherwise).
void check_model(const Fields& f, const ApiContext& ctx);
// temperature, top_p, top_k, min_p, the three penalties and seed (a random
// seed when none is given).
SamplingParams parse_sampling(const Fields& f);
// "stop": a string or a list of strings.
std::vector<std::string> parse_stop(const Fields& f, const std::string& key);
// Sets r.max_tokens from the first of `keys` given (else what the context
// leaves), refusing prompts the context cannot hold with both counts named.
void fit_context(Request& r, const Fields& f, std::initializer_list<const char*> keys,
                 const ApiContext& ctx);
// An OpenAI tools list, checked (type "function", a name, object parameters).
ojson parse_tools(const ojson& tools, const std::string& where);

// A conversation in the chat template's terms, as every chat-shaped API
// (chat completions, Anthropic messages, responses) builds it.
struct ChatSpec {
  ojson messages = ojson::array();   // [{role, content, reasoning_content?, tool_calls?}]
  ojson tools;                       // OpenAI function tools, or null
  std::string tool_choice = "auto";  // auto, none, required, or function (tool_name)
  std::string tool_name;
  bool parallel_tool_calls = true;
  std::optional<bool> thinking;  // the template's enable_thinking (unset: its default)
  // The answer's format (response_format, text.format): answer and schema
  // of a ConstraintRequest (Answer::free: none); `format_field` names it in errors.
  grammar::ConstraintRequest format;
  std::string format_field = "response_format";
};
// Renders and tokenizes c into r: prompt, in_reasoning, tools, tool_calls,
// and the constraint of its format and tool choice.
void render_chat_into(Request& r, const ChatSpec& c, const ApiContext& ctx);
// An OpenAI response format ({type: text | json_object | json_schema, ...}, as
// chat completions' response_format or, flattened, the Responses API's
// text.format) into c.format; errors name `where`.
void parse_response_format(ChatSpec& c, const ojson& format, const std::string& where);
// tool_calls in a chat message, checked: arguments as an object (from a JSON string too).
ojson tool_calls_of(const ojson& calls, const std::string& where);

}  // namespace tern::server
