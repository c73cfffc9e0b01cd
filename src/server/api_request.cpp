#include "server/api_request.h"

#include <mutex>
#include <random>
#include <set>

#include "core/json_text.h"

namespace tern::server {

namespace {

constexpr int64_t kMaxStops = 16;

uint64_t random_seed() {
  static std::mt19937_64 g{std::random_device{}()};
  static std::mutex m;
  std::lock_guard lock(m);
  return g();
}

}  // namespace

bool first_time(const std::string& key) {
  static std::mutex m;
  static std::set<std::string> seen;
  std::lock_guard lock(m);
  return seen.insert(key).second;
}

std::vector<std::string> ApiContext::listed_models() const {
  std::vector<std::string> out;
  for (const std::string& m : models)
    if (m != "*") out.push_back(m);
  return out;
}

std::string check_model(const Fields& f, const ApiContext& ctx) {
  const auto asked = f.string("model");
  if (!asked) {
    const auto listed = ctx.listed_models();
    return listed.empty() ? "" : listed.front();
  }
  for (const std::string& m : ctx.models)
    if (m == "*" || m == *asked) return *asked;
  std::string served;
  for (const std::string& m : ctx.models) served += (served.empty() ? "'" : ", '") + m + "'";
  throw ApiError(404, "The model '" + *asked + "' does not exist (this server has " + served + ")",
                 "model", "model_not_found");
}

SamplingParams parse_sampling(const Fields& f) {
  SamplingParams p;
  p.temperature = float(f.number("temperature", 0, 100).value_or(1.0));
  p.top_p = float(f.number("top_p", 0, 1).value_or(1.0));
  if (p.top_p == 0) p.top_p = 1e-6f;  // OpenAI takes 0: the most likely token
  p.top_k = int(f.integer("top_k", -1, 1 << 20).value_or(0));
  if (p.top_k < 0) p.top_k = 0;  // -1: off, as vLLM takes it
  p.min_p = float(f.number("min_p", 0, 1).value_or(0.0));
  p.presence_penalty = float(f.number("presence_penalty", -2, 2).value_or(0.0));
  p.frequency_penalty = float(f.number("frequency_penalty", -2, 2).value_or(0.0));
  p.repetition_penalty = float(f.number("repetition_penalty", 0.01, 10).value_or(1.0));
  const auto seed = f.integer("seed", INT64_MIN, INT64_MAX);
  p.seed = seed ? uint64_t(*seed) : random_seed();
  return p;
}

std::vector<std::string> parse_stop(const Fields& f, const std::string& key) {
  const ojson* v = f.get(key);
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array() || int64_t(v->size()) > kMaxStops)
    bad_request(key, "'{}' must be a string or a list of at most {} strings", key, kMaxStops);
  std::vector<std::string> out;
  for (const ojson& s : *v) {
    if (!s.is_string()) bad_request(key, "'{}' must hold strings only", key);
    out.push_back(s.get<std::string>());
  }
  return out;
}

void fit_context(Request& r, std::optional<int64_t> max_tokens, const std::string& field,
                 const ApiContext& ctx, ErrorStyle style) {
  const int64_t n = int64_t(r.prompt.size()), limit = ctx.ctx_size;
  if (n == 0) bad_request("prompt", "the prompt is empty");
  const bool anthropic = style == ErrorStyle::anthropic;
  auto refuse = [](std::string param, std::string message) {
    throw ApiError(400, message, std::move(param), "context_length_exceeded");
  };
  if (n >= limit)
    refuse("messages",
           anthropic ? fmt::format("prompt is too long: {} tokens > {} maximum", n, limit - 1)
                     : fmt::format("This model's maximum context length is {} tokens. However, "
                                   "your messages resulted in {} tokens. Please reduce the "
                                   "length of the messages.",
                                   limit, n));
  if (max_tokens && n + *max_tokens > limit)
    refuse(field, anthropic ? fmt::format("input length and `max_tokens` exceed context limit: "
                                          "{} + {} > {}, decrease input length or `max_tokens` "
                                          "and try again",
                                          n, *max_tokens, limit)
                            : fmt::format("This model's maximum context length is {} tokens. "
                                          "However, you requested {} tokens ({} in the messages, "
                                          "{} in the completion). Please reduce the length of "
                                          "the messages or completion.",
                                          limit, n + *max_tokens, n, *max_tokens));
  r.max_tokens = int(max_tokens.value_or(limit - n));
}

void constrain(Request& r, const grammar::ConstraintRequest& want, const std::string& field,
               const ApiContext& ctx) {
  if (want.empty()) return;
  if (!ctx.grammars) bad_request(field, "this server has no tokenizer for structured outputs");
  try {
    r.constraint = grammar::make_constraint(want, *ctx.grammars, r.in_reasoning, ctx.end_ids);
  } catch (const Error& e) {
    bad_request(field, "'{}': {}", field, e.what());
  }
}

ojson parse_tools(const ojson& tools, const std::string& where) {
  if (!tools.is_array()) bad_request(where, "'{}' must be a list", where);
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Fields t(tools[i], element(where, i));
    const std::string type = t.string("type").value_or("function");
    if (type != "function")
      bad_request(t.name("type"), "'{}': tools of type '{}' are not supported (function only)",
                  t.name("type"), type);
    const ojson* fn = t.object("function");
    if (!fn) bad_request(t.name("function"), "'{}' is required", t.name("function"));
    const Fields f(*fn, t.name("function"));
    const auto name = f.string("name");
    if (!name || name->empty()) bad_request(f.name("name"), "'{}' is required", f.name("name"));
    f.string("description");
    f.object("parameters");
    out.push_back(tools[i]);
  }
  return out;
}

ojson tool_calls_of(const ojson& calls, const std::string& where) {
  ojson out = ojson::array();
  for (size_t j = 0; j < calls.size(); ++j) {
    const Fields call(calls[j], element(where, j));
    const ojson* fn = call.object("function");
    if (!fn) bad_request(call.name("function"), "'{}' is required", call.name("function"));
    const Fields f(*fn, call.name("function"));
    const auto name = f.string("name");
    if (!name || name->empty()) bad_request(f.name("name"), "'{}' is required", f.name("name"));
    ojson args = ojson::object();
    if (const ojson* a = f.get("arguments")) {
      if (a->is_string()) {
        try {
          args = parse_json_text(a->get<std::string>(), fmt::format("'{}'", f.name("arguments")));
        } catch (const Error& e) {
          bad_request(f.name("arguments"), "{}", e.what());
        }
      } else {
        args = *a;
      }
      if (!args.is_object())
        bad_request(f.name("arguments"), "'{}' must be a JSON object", f.name("arguments"));
    }
    out.push_back({{"type", "function"}, {"function", {{"name", *name}, {"arguments", args}}}});
  }
  return out;
}

}  // namespace tern::server
