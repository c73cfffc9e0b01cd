#include "server/openai_request.h"

#include <algorithm>

#include "core/error.h"

namespace tern::server {

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

// Logprobs: chat's "logprobs": bool + "top_logprobs": n.
int chat_logprobs(const Fields& f) {
  const bool on = f.boolean("logprobs").value_or(false);
  const auto top = f.integer("top_logprobs", 0, 20);
  if (top && !on) bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  return on ? int(top.value_or(0)) : -1;
}

void parse_common(ApiRequest& a, const Fields& f, const ApiContext& ctx) {
  a.model = check_model(f, ctx);
  a.stream = f.boolean("stream").value_or(false);
  if (const ojson* so = f.object("stream_options"))
    a.include_usage = Fields(*so, "stream_options").boolean("include_usage").value_or(false);
  if (f.integer("n", 1, 1 << 20).value_or(1) != 1)
    bad_request("n", "'n' must be 1 (one choice per request)");
  a.req.sampling = parse_sampling(f);
  a.req.ignore_eos = f.boolean("ignore_eos").value_or(false);
}

}  // namespace

ToolChoice openai_tool_choice(const Fields& f) {
  using Mode = ToolChoice::Mode;
  ToolChoice c;
  c.parallel = f.boolean("parallel_tool_calls").value_or(true);
  const ojson* v = f.get("tool_choice");
  if (!v) return c;
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (s == "auto") return c;
    if (s != "none" && s != "required")
      bad_request("tool_choice", "'tool_choice' must be none, auto, required or a function");
    c.mode = s == "none" ? Mode::none : Mode::required;
    return c;
  }
  const Fields tc(*v, "tool_choice");
  const std::string type = tc.string("type").value_or("function");
  if (type != "function")
    bad_request("tool_choice.type", "'tool_choice.type' must be function, got '{}'", type);
  const ojson* fn = tc.object("function");
  auto name = fn ? Fields(*fn, "tool_choice.function").string("name") : tc.string("name");
  if (!name || name->empty())
    bad_request("tool_choice", "'tool_choice' names no function (function.name or name)");
  c.mode = Mode::function;
  c.function = *name;
  return c;
}

ApiRequest parse_chat_request(const ojson& body, const ApiContext& ctx) {
  const Fields f(body, "");
  ApiRequest a;
  parse_common(a, f, ctx);
  ChatSpec c;
  c.messages = messages_of(f.array("messages"));
  if (const ojson* t = f.array("tools"); t && !t->empty()) c.tools = parse_tools(*t, "tools");
  c.choice = openai_tool_choice(f);
  c.thinking = f.boolean("enable_thinking");
  if (const ojson* kw = f.object("chat_template_kwargs"))
    if (auto t = Fields(*kw, "chat_template_kwargs").boolean("enable_thinking")) c.thinking = t;
  if (auto effort = f.string("reasoning_effort"); effort && *effort == "none") c.thinking = false;
  if (const ojson* rf = f.object("response_format"))
    parse_response_format(c, *rf, "response_format");
  render_chat_into(a.req, c, ctx);
  a.req.stop = parse_stop(f, "stop");
  a.req.logprobs = chat_logprobs(f);
  auto max = f.integer("max_completion_tokens", 1, INT32_MAX);
  const char* max_field = max ? "max_completion_tokens" : "max_tokens";
  if (!max) max = f.integer("max_tokens", 1, INT32_MAX);
  fit_context(a.req, max, max_field, ctx, ErrorStyle::openai);
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
  fit_context(a.req, f.integer("max_tokens", 1, INT32_MAX), "max_tokens", ctx, ErrorStyle::openai);
  if (!f.get("max_tokens")) a.req.max_tokens = std::min(a.req.max_tokens, 16);  // OpenAI's default
  return a;
}

}  // namespace tern::server
