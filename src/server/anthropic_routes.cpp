#include "server/anthropic_routes.h"

#include "server/openai_response.h"

namespace tern::server {

namespace {

// Anthropic messages as the chat template's: tool_result blocks become tool
// messages (before the user's text), tool_use blocks tool calls, thinking
// blocks the assistant's reasoning.
ojson chat_messages(const Fields& f) {
  ojson out = ojson::array();
  if (const ojson* sys = f.get("system"))
    out.push_back({{"role", "system"}, {"content", parts_text(*sys, "system", {"text"})}});
  const ojson* msgs = f.array("messages");
  if (!msgs || msgs->empty()) bad_request("messages", "'messages' must be a non-empty list");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const Fields m((*msgs)[i], element("messages", i));
    const std::string role = m.string("role").value_or("");
    if (role != "user" && role != "assistant")
      bad_request(m.name("role"), "'{}' must be user or assistant, got '{}'", m.name("role"), role);
    const ojson* content = m.get("content");
    if (!content) bad_request(m.name("content"), "'{}' is required", m.name("content"));
    if (content->is_string()) {
      out.push_back({{"role", role}, {"content", content->get<std::string>()}});
      continue;
    }
    if (!content->is_array())
      bad_request(m.name("content"), "'{}' must be a string or a list of content blocks",
                  m.name("content"));
    std::string text, reasoning;
    ojson calls = ojson::array();
    for (size_t j = 0; j < content->size(); ++j) {
      const std::string where = element(m.name("content"), j);
      const Fields b((*content)[j], where);
      const std::string type = b.string("type").value_or("");
      if (type == "text") {
        text += b.string("text").value_or("");
      } else if (type == "tool_result" && role == "user") {
        const ojson* c = b.get("content");
        out.push_back(
            {{"role", "tool"}, {"content", c ? parts_text(*c, b.name("content"), {"text"}) : ""}});
      } else if (type == "tool_use" && role == "assistant") {
        const ojson* input = b.object("input");
        calls.push_back({{"function",
                          {{"name", b.string("name").value_or("")},
                           {"arguments", input ? *input : ojson::object()}}}});
      } else if (type == "thinking" && role == "assistant") {
        reasoning += b.string("thinking").value_or("");
      } else if (type == "redacted_thinking" && role == "assistant") {
        // Encrypted reasoning of another model: nothing to render.
      } else if (type == "image" || type == "document") {
        bad_request(b.name("type"), "'{}': {} blocks are not supported (this model takes text)",
                    b.name("type"), type);
      } else {
        bad_request(b.name("type"), "'{}': a {} message cannot hold a '{}' block", b.name("type"),
                    role, type);
      }
    }
    if (role == "user" && text.empty() && !out.empty() && out.back()["role"] == "tool") continue;
    ojson msg = {{"role", role}, {"content", text}};
    if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
    if (!calls.empty()) msg["tool_calls"] = tool_calls_of(calls, m.name("content"));
    out.push_back(std::move(msg));
  }
  return out;
}

ChatSpec chat_spec(const Fields& f) {
  ChatSpec c;
  c.messages = chat_messages(f);
  if (const ojson* tools = f.array("tools"); tools && !tools->empty()) {
    ojson t = ojson::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const Fields tool((*tools)[i], element("tools", i));
      const auto name = tool.string("name");
      if (!name || name->empty())
        bad_request(tool.name("name"), "'{}' is required", tool.name("name"));
      ojson fn = {{"name", *name}, {"description", tool.string("description").value_or("")}};
      if (const ojson* schema = tool.object("input_schema")) fn["parameters"] = *schema;
      t.push_back({{"type", "function"}, {"function", fn}});
    }
    c.tools = parse_tools(t, "tools");
  }
  if (const ojson* tc = f.object("tool_choice")) {
    const Fields choice(*tc, "tool_choice");
    const std::string type = choice.string("type").value_or("auto");
    if (type == "any")
      c.tool_choice = "required";
    else if (type == "tool")
      c.tool_choice = "function", c.tool_name = choice.string("name").value_or("");
    else if (type == "auto" || type == "none")
      c.tool_choice = type;
    else
      bad_request("tool_choice.type", "'tool_choice.type' must be auto, any, tool or none");
    c.parallel_tool_calls = !choice.boolean("disable_parallel_tool_use").value_or(false);
  }
  c.thinking = false;  // Anthropic's default: no extended thinking
  if (const ojson* th = f.object("thinking")) {
    const Fields t(*th, "thinking");
    const std::string type = t.string("type").value_or("");
    if (type != "enabled" && type != "disabled")
      bad_request("thinking.type", "'thinking.type' must be enabled or disabled");
    c.thinking = type == "enabled";
    if (type == "enabled") t.integer("budget_tokens", 1, INT32_MAX);
  }
  return c;
}

Request messages_request(const ojson& body, const ApiContext& ctx, bool count_only, bool& stream) {
  const Fields f(body, "");
  check_model(f, ctx);
  Request r;
  render_chat_into(r, chat_spec(f), ctx);
  if (count_only) return r;
  if (!f.get("max_tokens")) bad_request("max_tokens", "'max_tokens' is required");
  stream = f.boolean("stream").value_or(false);
  r.sampling = parse_sampling(f);
  r.stop = parse_stop(f, "stop_sequences");
  fit_context(r, f, {"max_tokens"}, ctx);
  return r;
}

const char* stop_reason(const Result& r) {
  if (r.finish == Finish::length) return "max_tokens";
  if (r.finish == Finish::tool_calls) return "tool_use";
  return r.stop_string ? "stop_sequence" : "end_turn";
}

ojson usage_of(const Result& r) {
  return {{"input_tokens", r.prompt_tokens - r.cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", r.cached_tokens},
          {"output_tokens", r.completion_tokens}};
}

std::string event(const std::string& type, const ojson& data) {
  return "event: " + type +
         "\ndata: " + data.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

class MessagesWriter : public JobWriter {
 public:
  MessagesWriter(std::string model, int64_t prompt_tokens)
      : model_(std::move(model)), id_(random_id("msg_")), prompt_(prompt_tokens) {}
  const std::string& id() const { return id_; }
  std::string content_type(bool stream) const override {
    return stream ? "text/event-stream" : "application/json";
  }
  ErrorStyle errors() const override { return ErrorStyle::anthropic; }

  std::string delta(const Delta& d) override {
    std::string s;
    if (d.cached_tokens && !started_) {
      started_ = true;
      ojson msg = message(ojson::array(), nullptr, std::nullopt);
      msg["usage"] = {{"input_tokens", prompt_ - *d.cached_tokens},
                      {"cache_creation_input_tokens", 0},
                      {"cache_read_input_tokens", *d.cached_tokens},
                      {"output_tokens", 0}};
      s += event("message_start", {{"type", "message_start"}, {"message", msg}});
      s += event("ping", {{"type", "ping"}});
    }
    if (!d.chat.reasoning.empty())
      s += block("thinking", "thinking_delta", "thinking", d.chat.reasoning);
    if (!d.chat.content.empty()) s += block("text", "text_delta", "text", d.chat.content);
    for (const ToolCall& c : d.chat.tool_calls) {
      s += close();
      const ojson b = {{"type", "tool_use"},
                       {"id", random_id("toolu_")},
                       {"name", c.name},
                       {"input", ojson::object()}};
      s += event("content_block_start",
                 {{"type", "content_block_start"}, {"index", index_}, {"content_block", b}});
      s += event("content_block_delta",
                 {{"type", "content_block_delta"},
                  {"index", index_},
                  {"delta", {{"type", "input_json_delta"}, {"partial_json", c.arguments_json()}}}});
      open_ = "tool_use";
      ojson whole = b;
      whole["input"] = c.arguments;
      blocks_.push_back(whole);
    }
    return s;
  }
  std::string end(const Result& r) override {
    if (!streaming_)
      return message(blocks_, stop_reason(r), r)
          .dump(-1, ' ', false, ojson::error_handler_t::replace);
    std::string s = close();
    s += event("message_delta",
               {{"type", "message_delta"},
                {"delta",
                 {{"stop_reason", stop_reason(r)},
                  {"stop_sequence", r.stop_string ? ojson(r.stop_sequence) : ojson(nullptr)}}},
                {"usage", {{"output_tokens", r.completion_tokens}}}});
    return s + event("message_stop", {{"type", "message_stop"}});
  }
  std::string failed(const std::string& msg) override {
    return event("error",
                 {{"type", "error"}, {"error", {{"type", "api_error"}, {"message", msg}}}});
  }
  void streaming() { streaming_ = true; }

 private:
  ojson message(const ojson& content, const char* reason, const std::optional<Result>& r) const {
    ojson m = {{"id", id_},
               {"type", "message"},
               {"role", "assistant"},
               {"model", model_},
               {"content", content},
               {"stop_reason", reason ? ojson(reason) : ojson(nullptr)},
               {"stop_sequence", r && r->stop_string ? ojson(r->stop_sequence) : ojson(nullptr)}};
    if (r) m["usage"] = usage_of(*r);
    return m;
  }
  // Text or thinking, appended to the open block of that type or a new one.
  std::string block(const std::string& type, const char* delta_type, const char* field,
                    const std::string& text) {
    std::string s;
    if (open_ != type) {
      s += close();
      ojson b = {{"type", type}, {field, ""}};
      if (type == "thinking") b["signature"] = "";
      s += event("content_block_start",
                 {{"type", "content_block_start"}, {"index", index_}, {"content_block", b}});
      open_ = type;
      blocks_.push_back(b);
    }
    blocks_.back()[field] = blocks_.back()[field].get<std::string>() + text;
    return s + event("content_block_delta", {{"type", "content_block_delta"},
                                             {"index", index_},
                                             {"delta", {{"type", delta_type}, {field, text}}}});
  }
  std::string close() {
    if (open_.empty()) return "";
    std::string s =
        event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
    ++index_;
    open_.clear();
    return s;
  }

  std::string model_, id_;
  int64_t prompt_;
  bool started_ = false, streaming_ = false;
  int index_ = 0;
  std::string open_;  // the type of the block being streamed, "" none
  ojson blocks_ = ojson::array();
};

}  // namespace

void add_anthropic_routes(HttpServer& s) {
  s.http().Post("/v1/messages",
                s.handler("/v1/messages", ErrorStyle::anthropic,
                          [&s](const httplib::Request& req, httplib::Response& res) {
                            if (!s.scheduler()) throw ApiError(503, "the model is still loading");
                            bool stream = false;
                            Request r = messages_request(HttpServer::json_body(req), s.context(),
                                                         false, stream);
                            auto w = std::make_shared<MessagesWriter>(s.context().model,
                                                                      int64_t(r.prompt.size()));
                            if (stream) w->streaming();
                            r.id = w->id();
                            s.serve_job(req, res, "/v1/messages", std::move(r), stream, w);
                          }));
  s.http().Post(
      "/v1/messages/count_tokens",
      s.handler(
          "/v1/messages/count_tokens", ErrorStyle::anthropic,
          [&s](const httplib::Request& req, httplib::Response& res) {
            if (!s.scheduler()) throw ApiError(503, "the model is still loading");
            bool stream = false;
            const Request r =
                messages_request(HttpServer::json_body(req), s.context(), true, stream);
            res.set_content(ojson{{"input_tokens", r.prompt.size()}}.dump(), "application/json");
          }));
}

}  // namespace tern::server
