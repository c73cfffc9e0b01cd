#include "server/anthropic_routes.h"

#include "server/anthropic_request.h"
#include "server/openai_response.h"

namespace tern::server {

namespace {

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
  s.post("/v1/messages",
         s.handler("/v1/messages", ErrorStyle::anthropic,
                   [&s](const HttpRequest& req, HttpResponse& res) {
                     if (!s.scheduler()) throw ApiError(503, "the model is still loading");
                     MessagesRequest m =
                         parse_messages_request(HttpServer::json_body(req), s.context(), false);
                     auto w =
                         std::make_shared<MessagesWriter>(m.model, int64_t(m.req.prompt.size()));
                     if (m.stream) w->streaming();
                     m.req.id = w->id();
                     s.serve_job(req, res, "/v1/messages", std::move(m.req), m.stream, w);
                   }));
  s.post("/v1/messages/count_tokens",
         s.handler("/v1/messages/count_tokens", ErrorStyle::anthropic,
                   [&s](const HttpRequest& req, HttpResponse& res) {
                     if (!s.scheduler()) throw ApiError(503, "the model is still loading");
                     const MessagesRequest m =
                         parse_messages_request(HttpServer::json_body(req), s.context(), true);
                     res.set_content(ojson{{"input_tokens", m.req.prompt.size()}}.dump(),
                                     "application/json");
                   }));
}

}  // namespace tern::server
