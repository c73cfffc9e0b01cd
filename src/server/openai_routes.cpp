#include "server/openai_routes.h"

#include <chrono>

#include "server/openai_response.h"

namespace tern::server {

namespace {

std::string sse(const ojson& j) {
  return "data: " + j.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

class OpenAiWriter : public JobWriter {
 public:
  OpenAiWriter(const ApiContext& ctx, const ApiRequest& a, bool chat)
      : out_(*ctx.tok, a.model, chat),
        chat_(chat),
        usage_(a.include_usage),
        echo_(a.echo ? a.prompt_text : "") {}
  const std::string& id() const { return out_.id(); }
  std::string content_type(bool stream) const override {
    return stream ? "text/event-stream" : "application/json";
  }
  std::string begin() override {
    if (chat_) return sse(out_.first_chunk());
    if (echo_.empty()) return "";
    Delta d;
    d.text = echo_;
    return sse(out_.chunks(d).front());
  }
  std::string delta(const Delta& d) override {
    std::string s;
    whole_.push_back(d);
    for (const ojson& c : out_.chunks(d)) s += sse(c);
    return s;
  }
  std::string end(const Result& r) override {
    if (streamed_) return finish_stream(r);
    for (const Delta& d : whole_) out_.add(d);
    return out_.response(r, echo_).dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
  std::string failed(const std::string& msg) override {
    return sse({{"error",
                 {{"message", msg},
                  {"type", "server_error"},
                  {"param", nullptr},
                  {"code", nullptr}}}}) +
           "data: [DONE]\n\n";
  }
  void streaming() { streamed_ = true; }

 private:
  std::string finish_stream(const Result& r) {
    std::string s = sse(out_.final_chunk(r));
    if (usage_) s += sse(out_.usage_chunk(r));
    return s + "data: [DONE]\n\n";
  }
  OpenAiOutput out_;
  bool chat_, usage_, streamed_ = false;
  std::string echo_;
  std::vector<Delta> whole_;
};

void generate(HttpServer& s, const HttpRequest& req, HttpResponse& res, bool chat) {
  if (!s.scheduler()) throw ApiError(503, "the model is still loading");
  const ojson body = HttpServer::json_body(req);
  ApiRequest a =
      chat ? parse_chat_request(body, s.context()) : parse_completion_request(body, s.context());
  auto w = std::make_shared<OpenAiWriter>(s.context(), a, chat);
  if (a.stream) w->streaming();
  a.req.id = w->id();
  s.serve_job(req, res, chat ? "/v1/chat/completions" : "/v1/completions", std::move(a.req),
              a.stream, w);
}

const Tokenizer& tokenizer(HttpServer& s) {
  if (!s.scheduler()) throw ApiError(503, "the model is still loading");
  return *s.context().tok;
}

}  // namespace

void add_openai_routes(HttpServer& s) {
  s.post("/v1/chat/completions", s.handler("/v1/chat/completions", ErrorStyle::openai,
                                           [&s](const HttpRequest& req, HttpResponse& res) {
                                             generate(s, req, res, true);
                                           }));
  s.post("/v1/completions", s.handler("/v1/completions", ErrorStyle::openai,
                                      [&s](const HttpRequest& req, HttpResponse& res) {
                                        generate(s, req, res, false);
                                      }));
  // OpenAI's list, with the context size where llama.cpp and vLLM put it
  // and the fields of Anthropic's list beside them.
  s.get("/v1/models",
        s.handler("/v1/models", ErrorStyle::openai, [&s](const HttpRequest&, HttpResponse& res) {
          if (!s.scheduler()) throw ApiError(503, "the model is still loading");
          const ApiContext& ctx = s.context();
          ojson data = ojson::array();
          for (const std::string& name : ctx.listed_models())
            data.push_back({{"id", name},
                            {"object", "model"},
                            {"type", "model"},
                            {"display_name", name},
                            {"created", 0},
                            {"created_at", "1970-01-01T00:00:00Z"},
                            {"owned_by", "tern"},
                            {"max_model_len", ctx.ctx_size},
                            {"context_length", ctx.ctx_size}});
          ojson out = {{"object", "list"}, {"data", data}, {"has_more", false}};
          out["first_id"] = data.empty() ? ojson(nullptr) : data.front()["id"];
          out["last_id"] = data.empty() ? ojson(nullptr) : data.back()["id"];
          res.set_content(out.dump(), "application/json");
        }));
  s.post(
      "/tokenize",
      s.handler("/tokenize", ErrorStyle::openai, [&s](const HttpRequest& req, HttpResponse& res) {
        const Tokenizer& tok = tokenizer(s);
        const ojson body = HttpServer::json_body(req);
        const Fields f(body, "");
        auto text = f.string("content");
        if (!text) text = f.string("prompt");
        if (!text) bad_request("content", "'content' (or 'prompt') is required");
        const auto ids = tok.encode(*text);
        ojson out = {{"tokens", ids}};
        if (f.boolean("with_pieces").value_or(false)) {
          ojson pieces = ojson::array();
          for (int32_t id : ids)
            pieces.push_back({{"id", id}, {"piece", tok.decode(std::span(&id, 1))}});
          out["tokens"] = pieces;
        }
        res.set_content(out.dump(-1, ' ', false, ojson::error_handler_t::replace),
                        "application/json");
      }));
  s.post(
      "/detokenize",
      s.handler("/detokenize", ErrorStyle::openai, [&s](const HttpRequest& req, HttpResponse& res) {
        const Tokenizer& tok = tokenizer(s);
        const ojson body = HttpServer::json_body(req);
        const Fields f(body, "");
        const ojson* ids = f.array("tokens");
        for (const char* k : {"content", "prompt"})
          if (!ids) ids = f.array(k);
        if (!ids) bad_request("tokens", "'tokens' (a list of token ids) is required");
        std::vector<int32_t> v;
        for (const ojson& x : *ids) {
          if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
              x.get<int64_t>() >= tok.vocab_size())
            bad_request("tokens", "'tokens' must hold ids in [0, {})", tok.vocab_size());
          v.push_back(int32_t(x.get<int64_t>()));
        }
        res.set_content(
            ojson{{"content", tok.decode(v)}}.dump(-1, ' ', false, ojson::error_handler_t::replace),
            "application/json");
      }));
}

}  // namespace tern::server
