// What every API's request parser shares: the server's context (tokenizer,
// served names, context size, grammars), the model name check, sampling and
// stop settings, tool lists and calls, and the one context-length check,
// worded as each API words it. Every problem is an ApiError naming the field.
#pragma once

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "grammar/request.h"
#include "server/json_fields.h"
#include "tokenizer/tokenizer.h"

namespace tern::server {

// What the parsers need to know of the server.
struct ApiContext {
  const Tokenizer* tok = nullptr;
  // The served names (the first is the default); "*" among them answers any.
  std::vector<std::string> models;
  int64_t ctx_size = 0;  // prompt + completion tokens at most
  // Structured outputs: compiled grammars over tok's vocabulary (nullptr:
  // requests that need a constraint get a 400), and the tokens that end a
  // completion (the constraint allows them where its grammar may end).
  grammar::GrammarCache* grammars = nullptr;
  std::vector<int32_t> end_ids;
  // The names /v1/models lists (the wildcard left out).
  std::vector<std::string> listed_models() const;
};

// The model name to report: the asked one when served (any, with "*"), the
// first served name when none is asked; 404 for another name.
std::string check_model(const Fields& f, const ApiContext& ctx);
// temperature, top_p, top_k, min_p, the three penalties and seed (a random
// seed when none is given).
SamplingParams parse_sampling(const Fields& f);
// "stop": a string or a list of strings.
std::vector<std::string> parse_stop(const Fields& f, const std::string& key);
// Sets r.max_tokens to `max_tokens` (the field named `field`), or to what the
// context leaves when it is not given. Prompts the context cannot hold are
// refused in `style`'s wording (Anthropic's two messages, which Claude Code
// acts on; OpenAI's with code context_length_exceeded).
void fit_context(Request& r, std::optional<int64_t> max_tokens, const std::string& field,
                 const ApiContext& ctx, ErrorStyle style);
// r.constraint for `want` (nothing when it asks for no constraint); grammar
// errors (an unsupported schema keyword, a bad GBNF) are 400s naming `field`.
void constrain(Request& r, const grammar::ConstraintRequest& want, const std::string& field,
               const ApiContext& ctx);
// An OpenAI tools list, checked (type "function", a name, object parameters).
ojson parse_tools(const ojson& tools, const std::string& where);
// tool_calls in a chat message, checked: arguments as an object (from a JSON string too).
ojson tool_calls_of(const ojson& calls, const std::string& where);

// True the first time `key` is seen in this process (for warnings that
// would otherwise repeat with every request).
bool first_time(const std::string& key);
template <typename... Args>
void warn_once(const std::string& key, fmt::format_string<Args...> f, Args&&... args) {
  if (first_time(key)) spdlog::warn(f, std::forward<Args>(args)...);
}

}  // namespace tern::server
