#include "server/openai_request.h"

#include <random>

#include "core/error.h"

#include "tokenizer/chat_template.h"
#include "tokenizer/next_turn.h"
#include "tokenizer/output_parser.h"

namespace tern::server {

namespace {

constexpr int64_t kMaxStops = 16;

}  // namespace

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
          args = ojson::parse(a->get<std::string>());
        } catch (const std::exception&) {
          bad_request(f.name("arguments"), "'{}' is not valid JSON", f.name("arguments"));
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

namespace {

ojson messages_of(const ojson* msgs) {
  if (!msgs || msgs->empty()) bad_request("messages", "'messages' must be a non-empty list");
  ojson out = ojson::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const Fields m((*msgs)[i], element("messages", i));
    std::string role = m.string("role").value_or("");
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad_request(m.name("role"),
                  "'{}' must be system, developer, user, assistant or tool, got '{}'",
                  m.name("role"), role);
    const ojson* content = m.get("content");
    ojson msg = {{"role", role},
                 {"content", content ? parts_text(*content, m.name("content"), {"text"}) : ""}};
    if (role == "assistant") {
      for (const char* key : {"reasoning_content", "reasoning"})
        if (auto r = m.string(key)) msg["reasoning_content"] = *r;
      if (const ojson* calls = m.array("tool_calls"); calls && !calls->empty())
        msg["tool_calls"] = tool_calls_of(*calls, m.name("tool_calls"));
    } else if (!content) {
      bad_request(m.name("content"), "'{}' is required", m.name("content"));
    }
    out.push_back(std::move(msg));
  }
  return out;
}

uint64_t random_seed() {
  static std::mt19937_64 g{std::random_device{}()};
  static std::mutex m;
  std::lock_guard lock(m);
  return g();
}

// Logprobs: chat's "logprobs": bool + "top_logprobs": n.
int chat_logprobs(const Fields& f) {
  const bool on = f.boolean("logprobs").value_or(false);
  const auto top = f.integer("top_logprobs", 0, 20);
  if (top && !on) bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  return on ? int(top.value_or(0)) : -1;
}

void parse_common(ApiRequest& a, const Fields& f, const ApiContext& ctx) {
  check_model(f, ctx);
  a.stream = f.boolean("stream").value_or(false);
  if (const ojson* so = f.object("stream_options"))
    a.include_usage = Fields(*so, "stream_options").boolean("include_usage").value_or(false);
  if (f.integer("n", 1, 1 << 20).value_or(1) != 1)
    bad_request("n", "'n' must be 1 (one choice per request)");
  a.req.sampling = parse_sampling(f);
  a.req.ignore_eos = f.boolean("ignore_eos").value_or(false);
}

}  // namespace

void check_model(const Fields& f, const ApiContext& ctx) {
  if (auto m = f.string("model"); m && *m != ctx.model)
    throw ApiError(404,
                   "The model '" + *m + "' does not exist (this server has '" + ctx.model + "')",
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

void fit_context(Request& r, const Fields& f, std::initializer_list<const char*> keys,
                 const ApiContext& ctx) {
  const int64_t n = int64_t(r.prompt.size());
  if (n == 0) bad_request("prompt", "the prompt is empty");
  if (n >= ctx.ctx_size)
    bad_request("messages",
                "This model's maximum context length is {} tokens. However, your prompt has {} "
                "tokens. Please reduce the length of the prompt.",
                ctx.ctx_size, n);
  std::optional<int64_t> max;
  for (const char* k : keys)
    if (!max) max = f.integer(k, 1, INT32_MAX);
  if (max && n + *max > ctx.ctx_size)
    bad_request("max_tokens",
                "This model's maximum context length is {} tokens. However, you requested {} "
                "tokens ({} in the prompt, {} for the completion).",
                ctx.ctx_size, n + *max, n, *max);
  r.max_tokens = int(max.value_or(ctx.ctx_size - n));
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

namespace {

// r.constraint for `want` (nothing when it asks for no constraint); grammar
// errors (an unsupported schema keyword, a bad GBNF) are 400s naming `field`.
void constrain(Request& r, const grammar::ConstraintRequest& want, const std::string& field,
               const ApiContext& ctx) {
  if (want.empty()) return;
  if (!ctx.grammars) bad_request(field, "this server has no tokenizer for structured outputs");
  try {
    r.constraint = grammar::make_constraint(want, *ctx.grammars, r.in_reasoning, ctx.end_ids);
  } catch (const Error& e) {
    bad_request(field, "{}", e.what());
  }
}

}  // namespace

void parse_response_format(ChatSpec& c, const ojson& format, const std::string& where) {
  c.format_field = where;
  try {
    grammar::response_format(format, where, c.format);
  } catch (const Error& e) {
    bad_request(where, "{}", e.what());
  }
}

void render_chat_into(Request& r, const ChatSpec& c, const ApiContext& ctx) {
  ojson render = {{"messages", c.messages}, {"add_generation_prompt", true}};
  if (c.tool_choice != "none" && !c.tools.is_null()) render["tools"] = c.tools;
  if (c.thinking) render["enable_thinking"] = *c.thinking;
  std::string text;
  try {
    text = render_chat(render);
  } catch (const ChatTemplateError& e) {
    bad_request("messages", "{}", e.what());
  }
  r.prompt = ctx.tok->encode(text);
  r.in_reasoning = prompt_opens_reasoning(text);
  r.next_turn = [render = std::move(render), tok = ctx.tok](const ParsedDelta& answer) {
    return next_turn_prefix(render, *tok, answer);
  };
  r.tools = c.tools;
  r.tool_calls = c.tool_choice != "none";
  using Tools = grammar::ConstraintRequest::Tools;
  grammar::ConstraintRequest want = c.format;
  const bool have_tools = !c.tools.is_null() && !c.tools.empty();
  if ((c.tool_choice == "required" || c.tool_choice == "function") && !have_tools)
    bad_request("tool_choice", "tool_choice '{}' needs a non-empty tools list", c.tool_choice);
  if (have_tools && c.tool_choice != "none") {
    want.tools = c.tool_choice == "required"   ? Tools::required
                 : c.tool_choice == "function" ? Tools::named
                                               : Tools::automatic;
    want.tool_list = c.tools;
    want.function = c.tool_name;
    want.parallel = c.parallel_tool_calls;
  }
  constrain(
      r, want,
      want.answer != grammar::ConstraintRequest::Answer::free ? c.format_field : "tool_choice",
      ctx);
}

ApiRequest parse_chat_request(const ojson& body, const ApiContext& ctx) {
  const Fields f(body, "");
  ApiRequest a;
  parse_common(a, f, ctx);
  ChatSpec c;
  c.messages = messages_of(f.array("messages"));
  if (const ojson* t = f.array("tools"); t && !t->empty()) c.tools = parse_tools(*t, "tools");
  if (const ojson* choice = f.get("tool_choice")) {
    if (choice->is_string()) {
      c.tool_choice = choice->get<std::string>();
    } else {
      const Fields tc(*choice, "tool_choice");
      const ojson* fn = tc.object("function");
      c.tool_choice = "function";
      c.tool_name = fn ? Fields(*fn, "tool_choice.function").string("name").value_or("") : "";
    }
    if (c.tool_choice != "auto" && c.tool_choice != "none" && c.tool_choice != "required" &&
        c.tool_choice != "function")
      bad_request("tool_choice", "'tool_choice' must be none, auto, required or a function");
  }
  c.parallel_tool_calls = f.boolean("parallel_tool_calls").value_or(true);
  c.thinking = f.boolean("enable_thinking");
  if (const ojson* kw = f.object("chat_template_kwargs"))
    if (auto t = Fields(*kw, "chat_template_kwargs").boolean("enable_thinking")) c.thinking = t;
  if (auto effort = f.string("reasoning_effort"); effort && *effort == "none") c.thinking = false;
  if (const ojson* rf = f.object("response_format"))
    parse_response_format(c, *rf, "response_format");
  render_chat_into(a.req, c, ctx);
  a.req.stop = parse_stop(f, "stop");
  a.req.logprobs = chat_logprobs(f);
  fit_context(a.req, f, {"max_completion_tokens", "max_tokens"}, ctx);
  return a;
}

ApiRequest parse_completion_request(const ojson& body, const ApiContext& ctx) {
  const Fields f(body, "");
  ApiRequest a;
  parse_common(a, f, ctx);
  a.req.output = Request::Output::text;
  const ojson* p = f.get("prompt");
  if (!p) bad_request("prompt", "'prompt' is required");
  ojson one = *p;
  if (one.is_array() && one.size() == 1 && (one[0].is_string() || one[0].is_array())) one = one[0];
  if (one.is_string()) {
    a.prompt_text = one.get<std::string>();
    a.req.prompt = ctx.tok->encode(a.prompt_text);
  } else if (one.is_array() && !one.empty() &&
             std::all_of(one.begin(), one.end(),
                         [](const ojson& x) { return x.is_number_integer(); })) {
    for (const ojson& x : one) {
      const int64_t id = x.get<int64_t>();
      if (id < 0 || id >= ctx.tok->vocab_size())
        bad_request("prompt", "token id {} is outside the vocabulary [0, {})", id,
                    ctx.tok->vocab_size());
      a.req.prompt.push_back(int32_t(id));
    }
    a.prompt_text = ctx.tok->decode(a.req.prompt);
  } else {
    bad_request("prompt",
                "'prompt' must be a string or a list of token ids (one prompt per request)");
  }
  if (f.get("suffix")) bad_request("suffix", "'suffix' is not supported");
  if (f.integer("best_of", 1, 1 << 20).value_or(1) != 1)
    bad_request("best_of", "'best_of' must be 1");
  a.echo = f.boolean("echo").value_or(false);
  if (const ojson* lp = f.get("logprobs"); lp && lp->is_boolean()) {
    a.req.logprobs = lp->get<bool>() ? 0 : -1;
  } else if (auto n = f.integer("logprobs", 0, 20)) {
    a.req.logprobs = int(*n);
  }
  a.req.stop = parse_stop(f, "stop");
  // llama.cpp's grammar (GBNF) and json_schema, or response_format.
  const char* field = f.get("grammar")       ? "grammar"
                      : f.get("json_schema") ? "json_schema"
                                             : "response_format";
  grammar::ConstraintRequest want;
  try {
    want = grammar::completion_constraints(body);
  } catch (const Error& e) {
    bad_request(field, "{}", e.what());
  }
  constrain(a.req, want, field, ctx);
  fit_context(a.req, f, {"max_tokens"}, ctx);
  if (!f.get("max_tokens")) a.req.max_tokens = std::min(a.req.max_tokens, 16);  // OpenAI's default
  return a;
}

}  // namespace tern::server
