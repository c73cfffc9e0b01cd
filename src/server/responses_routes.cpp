#include "server/responses_routes.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "server/openai_response.h"

namespace tern::server {

namespace {

// Input items as chat messages appended to `out`.
void add_items(ojson& out, const ojson& input) {
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input.get<std::string>()}});
    return;
  }
  if (!input.is_array()) bad_request("input", "'input' must be a string or a list of items");
  std::string reasoning;  // a reasoning item goes with the assistant turn after it
  auto assistant = [&]() -> ojson& {
    if (out.empty() || out.back()["role"] != "assistant")
      out.push_back({{"role", "assistant"}, {"content", ""}});
    if (!reasoning.empty()) out.back()["reasoning_content"] = std::exchange(reasoning, "");
    return out.back();
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const Fields it(input[i], element("input", i));
    const std::string type = it.string("type").value_or("message");
    if (type == "message") {
      std::string role = it.string("role").value_or("");
      if (role == "developer") role = "system";
      if (role != "user" && role != "assistant" && role != "system")
        bad_request(it.name("role"), "'{}' must be user, assistant, system or developer",
                    it.name("role"));
      const ojson* c = it.get("content");
      ojson msg = {
          {"role", role},
          {"content",
           c ? parts_text(*c, it.name("content"), {"input_text", "output_text", "text"}) : ""}};
      if (role == "assistant" && !reasoning.empty())
        msg["reasoning_content"] = std::exchange(reasoning, "");
      out.push_back(std::move(msg));
    } else if (type == "function_call") {
      ojson& a = assistant();
      if (!a.contains("tool_calls")) a["tool_calls"] = ojson::array();
      const ojson call = {{"function",
                           {{"name", it.string("name").value_or("")},
                            {"arguments", it.string("arguments").value_or("{}")}}}};
      a["tool_calls"].push_back(tool_calls_of(ojson::array({call}), it.name("arguments"))[0]);
    } else if (type == "function_call_output") {
      const ojson* o = it.get("output");
      out.push_back(
          {{"role", "tool"},
           {"content",
            o ? parts_text(*o, it.name("output"), {"input_text", "output_text", "text"}) : ""}});
    } else if (type == "reasoning") {
      if (const ojson* c = it.array("content"))
        for (const ojson& p : *c) reasoning += p.value("text", "");
    } else {
      bad_request(it.name("type"), "'{}': input items of type '{}' are not supported",
                  it.name("type"), type);
    }
  }
}

struct ResponsesRequest {
  Request req;
  ojson conversation;  // what a follow-up continues (without the instructions)
  bool stream = false, store = true;
  std::string previous;
};

ResponsesRequest parse(const ojson& body, const ApiContext& ctx, ResponseStore& store) {
  const Fields f(body, "");
  check_model(f, ctx);
  ResponsesRequest r;
  if (auto prev = f.string("previous_response_id")) {
    auto stored = store.get(*prev);
    if (!stored)
      throw ApiError(404, "Previous response with id '" + *prev + "' not found.",
                     "previous_response_id");
    r.conversation = *stored;
    r.previous = *prev;
  } else {
    r.conversation = ojson::array();
  }
  const ojson* input = f.get("input");
  if (!input) bad_request("input", "'input' is required");
  add_items(r.conversation, *input);
  ChatSpec c;
  if (auto instr = f.string("instructions"))
    c.messages.push_back({{"role", "system"}, {"content", *instr}});
  for (const ojson& m : r.conversation) c.messages.push_back(m);
  if (const ojson* tools = f.array("tools")) {
    ojson fns = ojson::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const Fields t((*tools)[i], element("tools", i));
      const std::string type = t.string("type").value_or("");
      if (type != "function") {
        spdlog::warn("responses: tool of type '{}' ignored (function tools only)", type);
        continue;
      }
      ojson fn = {{"name", t.string("name").value_or("")},
                  {"description", t.string("description").value_or("")}};
      if (const ojson* p = t.object("parameters")) fn["parameters"] = *p;
      fns.push_back({{"type", "function"}, {"function", fn}});
    }
    if (!fns.empty()) c.tools = parse_tools(fns, "tools");
  }
  if (const ojson* tc = f.get("tool_choice")) {
    if (tc->is_string()) {
      c.tool_choice = tc->get<std::string>();
    } else {
      c.tool_choice = "function";
      c.tool_name = Fields(*tc, "tool_choice").string("name").value_or("");
    }
  }
  c.parallel_tool_calls = f.boolean("parallel_tool_calls").value_or(true);
  if (const ojson* rs = f.object("reasoning"))
    if (auto effort = Fields(*rs, "reasoning").string("effort"); effort && *effort == "none")
      c.thinking = false;
  if (const ojson* text = f.object("text"))
    if (const ojson* fmt = Fields(*text, "text").object("format"))
      parse_response_format(c, *fmt, "text.format");
  render_chat_into(r.req, c, ctx);
  r.req.sampling = parse_sampling(f);
  fit_context(r.req, f, {"max_output_tokens"}, ctx);
  r.stream = f.boolean("stream").value_or(false);
  r.store = f.boolean("store").value_or(true);
  return r;
}

std::string sse(const ojson& e) {
  return "event: " + e["type"].get<std::string>() +
         "\ndata: " + e.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

class ResponsesWriter : public JobWriter {
 public:
  ResponsesWriter(const ApiContext& ctx, ResponsesRequest& r, ResponseStore& store)
      : ctx_(ctx),
        store_(store),
        conversation_(r.conversation),
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
      store_.put(id_, conv);
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
                 {"model", ctx_.model},
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
  ojson conversation_;
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
  s.http().Post("/v1/responses",
                s.handler("/v1/responses", ErrorStyle::openai,
                          [&s, &store](const httplib::Request& req, httplib::Response& res) {
                            if (!s.scheduler()) throw ApiError(503, "the model is still loading");
                            ResponsesRequest r =
                                parse(HttpServer::json_body(req), s.context(), store);
                            auto w = std::make_shared<ResponsesWriter>(s.context(), r, store);
                            if (r.stream) w->streaming();
                            r.req.id = w->id();
                            s.serve_job(req, res, "/v1/responses", std::move(r.req), r.stream, w);
                          }));
}

}  // namespace tern::server
