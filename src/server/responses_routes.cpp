#include "server/responses_routes.h"

#include <chrono>

#include "server/openai_response.h"
#include "server/responses_request.h"

namespace tern::server {

namespace {

std::string sse(const ojson& e) {
  return "event: " + e["type"].get<std::string>() +
         "\ndata: " + e.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

class ResponsesWriter : public JobWriter {
 public:
  ResponsesWriter(const ApiContext& ctx, ResponsesRequest& r, ResponseStore& store)
      : ctx_(ctx),
        store_(store),
        model_(r.model),
        conversation_(r.conversation),
        namespaced_(r.namespaced),
        store_it_(r.store),
        previous_(r.previous),
        id_(random_id("resp_")),
        created_(std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count()) {}
  const std::string& id() const { return id_; }
  std::string content_type(bool stream) const override {
    return stream ? "text/event-stream" : "application/json";
  }
  std::string begin() override {
    std::string s = emit({{"type", "response.created"}, {"response", response(nullptr)}});
    return s + emit({{"type", "response.in_progress"}, {"response", response(nullptr)}});
  }
  std::string delta(const Delta& d) override {
    std::string s;
    if (!d.chat.reasoning.empty()) s += text("reasoning", d.chat.reasoning);
    if (!d.chat.content.empty()) s += text("message", d.chat.content);
    for (const ToolCall& c : d.chat.tool_calls) {
      s += close();
      ojson item = {
          {"type", "function_call"}, {"id", random_id("fc_")}, {"call_id", random_id("call_")},
          {"name", c.name},          {"arguments", ""},        {"status", "in_progress"}};
      if (auto ns = namespaced_.find(c.name); ns != namespaced_.end())
        item["namespace"] = ns->second.first, item["name"] = ns->second.second;
      s += emit({{"type", "response.output_item.added"},
                 {"output_index", output_.size()},
                 {"item", item}});
      const std::string args = c.arguments_json();
      s += emit({{"type", "response.function_call_arguments.delta"},
                 {"item_id", item["id"]},
                 {"output_index", output_.size()},
                 {"delta", args}});
      s += emit({{"type", "response.function_call_arguments.done"},
                 {"item_id", item["id"]},
                 {"output_index", output_.size()},
                 {"arguments", args}});
      item["arguments"] = args;
      item["status"] = "completed";
      s += emit({{"type", "response.output_item.done"},
                 {"output_index", output_.size()},
                 {"item", item}});
      output_.push_back(item);
      assistant_calls_.push_back({{"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    return s;
  }
  std::string end(const Result& r) override {
    std::string s = close();
    ojson final_response = response(&r);
    if (store_it_) {  // the conversation and this turn, for a follow-up
      ojson conv = conversation_;
      ojson msg = {{"role", "assistant"}, {"content", content_}};
      if (!reasoning_.empty()) msg["reasoning_content"] = reasoning_;
      if (!assistant_calls_.empty()) msg["tool_calls"] = assistant_calls_;
      conv.push_back(msg);
      store_.put(id_, conv, output_);
    }
    if (!streaming_) return final_response.dump(-1, ' ', false, ojson::error_handler_t::replace);
    return s + emit({{"type", "response.completed"}, {"response", final_response}});
  }
  std::string failed(const std::string& msg) override {
    return emit(
        {{"type", "error"}, {"code", "server_error"}, {"message", msg}, {"param", nullptr}});
  }
  void streaming() { streaming_ = true; }

 private:
  std::string emit(ojson e) {
    e["sequence_number"] = seq_++;
    return streaming_ ? sse(e) : "";
  }
  ojson response(const Result* r) const {
    ojson out = {{"id", id_},
                 {"object", "response"},
                 {"created_at", created_},
                 {"status", !r                            ? "in_progress"
                            : r->finish == Finish::length ? "incomplete"
                                                          : "completed"},
                 {"model", model_},
                 {"output", r ? output_ : ojson::array()},
                 {"previous_response_id", previous_.empty() ? ojson(nullptr) : ojson(previous_)},
                 {"store", store_it_},
                 {"error", nullptr},
                 {"incomplete_details", r && r->finish == Finish::length
                                            ? ojson{{"reason", "max_output_tokens"}}
                                            : ojson(nullptr)}};
    if (r) {
      out["output_text"] = content_;
      const int64_t reasoning_tokens =
          reasoning_.empty() ? 0 : int64_t(ctx_.tok->encode(reasoning_).size());
      out["usage"] = {{"input_tokens", r->prompt_tokens},
                      {"input_tokens_details", {{"cached_tokens", r->cached_tokens}}},
                      {"output_tokens", r->completion_tokens},
                      {"output_tokens_details",
                       {{"reasoning_tokens", std::min(reasoning_tokens, r->completion_tokens)}}},
                      {"total_tokens", r->prompt_tokens + r->completion_tokens}};
    }
    return out;
  }
  // Reasoning or message text, into the open item of that kind or a new one.
  std::string text(const std::string& kind, const std::string& t) {
    std::string s;
    const bool reasoning = kind == "reasoning";
    const char* part_type = reasoning ? "reasoning_text" : "output_text";
    if (open_ != kind) {
      s += close();
      open_ = kind;
      item_ = reasoning ? ojson{{"type", "reasoning"},
                                {"id", random_id("rs_")},
                                {"summary", ojson::array()},
                                {"content", ojson::array()}}
                        : ojson{{"type", "message"},
                                {"id", random_id("msg_")},
                                {"status", "in_progress"},
                                {"role", "assistant"},
                                {"content", ojson::array()}};
      part_ = {{"type", part_type}, {"text", ""}};
      if (!reasoning) part_["annotations"] = ojson::array();
      s += emit({{"type", "response.output_item.added"},
                 {"output_index", output_.size()},
                 {"item", item_}});
      s += emit({{"type", "response.content_part.added"},
                 {"item_id", item_["id"]},
                 {"output_index", output_.size()},
                 {"content_index", 0},
                 {"part", part_}});
    }
    part_["text"] = part_["text"].get<std::string>() + t;
    (reasoning ? reasoning_ : content_) += t;
    return s + emit({{"type",
                      reasoning ? "response.reasoning_text.delta" : "response.output_text.delta"},
                     {"item_id", item_["id"]},
                     {"output_index", output_.size()},
                     {"content_index", 0},
                     {"delta", t}});
  }
  std::string close() {
    if (open_.empty()) return "";
    const bool reasoning = open_ == "reasoning";
    std::string s =
        emit({{"type", reasoning ? "response.reasoning_text.done" : "response.output_text.done"},
              {"item_id", item_["id"]},
              {"output_index", output_.size()},
              {"content_index", 0},
              {"text", part_["text"]}});
    s += emit({{"type", "response.content_part.done"},
               {"item_id", item_["id"]},
               {"output_index", output_.size()},
               {"content_index", 0},
               {"part", part_}});
    item_["content"].push_back(part_);
    if (!reasoning) item_["status"] = "completed";
    s += emit(
        {{"type", "response.output_item.done"}, {"output_index", output_.size()}, {"item", item_}});
    output_.push_back(item_);
    open_.clear();
    return s;
  }

  const ApiContext& ctx_;
  ResponseStore& store_;
  std::string model_;
  ojson conversation_;
  std::map<std::string, std::pair<std::string, std::string>> namespaced_;
  bool store_it_;
  std::string previous_, id_;
  int64_t created_;
  bool streaming_ = false;
  int64_t seq_ = 0;
  std::string open_, content_, reasoning_;
  ojson item_, part_, output_ = ojson::array(), assistant_calls_ = ojson::array();
};

}  // namespace

void add_responses_routes(HttpServer& s, ResponseStore& store) {
  s.post("/v1/responses",
         s.handler("/v1/responses", ErrorStyle::openai,
                   [&s, &store](const HttpRequest& req, HttpResponse& res) {
                     if (!s.scheduler()) throw ApiError(503, "the model is still loading");
                     ResponsesRequest r =
                         parse_responses_request(HttpServer::json_body(req), s.context(), store);
                     auto w = std::make_shared<ResponsesWriter>(s.context(), r, store);
                     if (r.stream) w->streaming();
                     r.req.id = w->id();
                     s.serve_job(req, res, "/v1/responses", std::move(r.req), r.stream, w);
                   }));
}

}  // namespace tern::server
