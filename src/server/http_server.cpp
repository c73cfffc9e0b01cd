#include "server/http_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>

#include "core/json_text.h"
#include "server/openai_response.h"

namespace tern::server {

namespace {

using Clock = std::chrono::steady_clock;

// A Host header or origin authority naming this machine: the name (any
// case) and an optional port, nothing else.
bool loopback_host(std::string_view authority) {
  std::string h(authority);
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string_view name = h, port;
  if (name.starts_with("[")) {
    const size_t close = name.find(']');
    if (close == std::string_view::npos) return false;
    port = name.substr(close + 1);
    name = name.substr(0, close + 1);
  } else if (const size_t colon = name.find(':'); colon != std::string_view::npos) {
    port = name.substr(colon);
    name = name.substr(0, colon);
  }
  if (!port.empty() &&
      (port.size() == 1 || port[0] != ':' ||
       !std::all_of(port.begin() + 1, port.end(), [](char c) { return c >= '0' && c <= '9'; })))
    return false;
  return name == "localhost" || name == "127.0.0.1" || name == "[::1]" ||
         name.ends_with(".localhost");
}

// Whether a client's key is the key (not empty), in time that depends on the
// given text's length only, not on where it first differs.
bool same_secret(std::string_view given, std::string_view key) {
  size_t diff = given.size() ^ key.size();
  for (size_t i = 0; i < given.size(); ++i)
    diff |= size_t(uint8_t(given[i]) ^ uint8_t(key[i % key.size()]));
  return diff == 0;
}

// Anthropic's routes answer errors in Anthropic's shape, whoever refuses them.
ErrorStyle style_of(const std::string& path) {
  return path.starts_with("/v1/messages") ? ErrorStyle::anthropic : ErrorStyle::openai;
}

bool loopback_bind(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.starts_with("127.");
}

// An Origin header is allowed from loopback pages, or where --cors-origin says.
bool origin_allowed(const std::string& origin, const std::vector<std::string>& extra) {
  for (const std::string& o : extra)
    if (o == "*" || o == origin) return true;
  for (std::string_view scheme : {"http://", "https://"})
    if (std::string_view(origin).starts_with(scheme))
      return loopback_host(std::string_view(origin).substr(scheme.size()));
  return false;
}

// A chat answer that ended: its conversation's next turn will likely start
// with it, so prefill that while the engine is idle. Exact: those are the very
// forward() calls the next turn would run from this one's snapshot
// (docs/serving.md), so only the time moves. Best effort: the answer has
// been given, so nothing here may fail the request.
void prefill_next_turn(Scheduler& sched, const Job& job, const Job::Event& end,
                       const ParsedDelta& answer, int64_t ctx_size, Metrics& metrics) {
  const Request& r = job.request();
  if (!end.result || end.result->finish == Finish::cancelled || !r.next_turn ||
      !sched.engine().reuses())
    return;
  try {
    Request next = prefill_only(r.next_turn(answer));
    next.id = r.id + "-next";
    const size_t n = next.prompt.size();
    if (n <= r.prompt.size() || int64_t(n) >= ctx_size) return;
    if (!sched.submit_background(std::move(next))) return;
    metrics.idle_prefill();
    spdlog::debug("request id={}: prefilling its next turn's {} tokens while idle", r.id, n);
  } catch (const std::exception& e) {
    spdlog::warn("request id={}: no idle prefill: {}", r.id, e.what());
  }
}

}  // namespace

void send_error(const HttpRequest& req, HttpResponse& res, const ApiError& e, ErrorStyle style) {
  // One warning line per refusal: the client's x-request-id (else a new
  // id), endpoint, status and message, JSON-quoted so that nothing a client
  // sent can start a line of its own. Never the body or the key.
  std::string id = req.header("x-request-id");
  if (id.empty() || id.size() > 64) id = random_id("req_");
  auto quote = [](const std::string& text) {
    return ojson(text).dump(-1, ' ', false, ojson::error_handler_t::replace);
  };
  spdlog::warn("request id={} endpoint={} status={} error={}", quote(id), quote(req.path), e.status,
               quote(e.what()));
  res.status = e.status;
  ojson body;
  if (style == ErrorStyle::anthropic) {
    const char* type = e.status == 401   ? "authentication_error"
                       : e.status == 403 ? "permission_error"
                       : e.status == 404 ? "not_found_error"
                       : e.status == 413 ? "request_too_large"
                       : e.status == 429 ? "rate_limit_error"
                       : e.status == 503 ? "overloaded_error"
                       : e.status >= 500 ? "api_error"
                                         : "invalid_request_error";
    body = {{"type", "error"}, {"error", {{"type", type}, {"message", e.what()}}}};
  } else {
    body = {{"error",
             {{"message", e.what()},
              {"type", e.type()},
              {"param", e.param.empty() ? ojson(nullptr) : ojson(e.param)},
              {"code", e.code.empty() ? ojson(nullptr) : ojson(e.code)}}}};
  }
  res.set_content(body.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
}

HttpServer::HttpServer(const ServeOptions& o, Metrics& metrics)
    : opt_(o), metrics_(metrics), transport_(*this, o.limits) {
  metrics_.gauge("tern_http_connections", "Open HTTP connections.",
                 [this] { return double(transport_.open_connections()); });
  metrics_.counter("tern_http_connections_evicted_total",
                   "Connections closed to make room (idle or slow ones, over the caps).",
                   [this] { return double(transport_.evicted_connections()); });
  add_routes();
}

HttpServer::~HttpServer() {
  stop();
}

bool HttpServer::admit(const HttpRequest& req, HttpResponse& res) {
  // DNS rebinding: a page on another name that resolves to 127.0.0.1.
  // No Host at all is an HTTP/1.0 client, never a browser.
  if (loopback_bind(opt_.host) && req.has_header("Host") && !loopback_host(req.header("Host"))) {
    deny(req, res, ApiError(403, "Host '" + req.header("Host") + "' is not allowed"),
         ErrorStyle::openai);
    return false;
  }
  const std::string origin = req.header("Origin");
  if (!origin.empty()) {
    if (!origin_allowed(origin, opt_.cors_origins)) {
      deny(req, res, ApiError(403, "origin '" + origin + "' is not allowed (see --cors-origin)"),
           ErrorStyle::openai);
      return false;
    }
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
    if (req.method == "OPTIONS") {
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers",
                     "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
      res.set_header("Access-Control-Max-Age", "600");
      res.status = 204;
      return false;
    }
  }
  if (opt_.api_key.empty() || req.path == "/health") return true;
  const std::string auth = req.header("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  const bool bearer = std::string_view(auth).starts_with(kBearer);
  if ((bearer && same_secret(std::string_view(auth).substr(kBearer.size()), opt_.api_key)) ||
      same_secret(req.header("x-api-key"), opt_.api_key))
    return true;
  deny(req, res,
       ApiError(401, auth.empty() && !req.has_header("x-api-key") ? "missing API key"
                                                                  : "invalid API key"),
       style_of(req.path));
  return false;
}

bool HttpServer::quick(const HttpRequest& req) const {
  const auto it = routes_.find(req.path);
  return req.method != "POST" || it == routes_.end() || !it->second.post;
}

void HttpServer::answer(const HttpRequest& req, HttpResponse& res) {
  const auto it = routes_.find(req.path);
  const std::string method = req.method == "HEAD" ? "GET" : req.method;
  const Handler* h = it == routes_.end() ? nullptr
                     : method == "GET"   ? &it->second.get
                     : method == "POST"  ? &it->second.post
                                         : nullptr;
  if (h && *h) return (*h)(req, res);
  const bool known = it != routes_.end();
  const ApiError e = known ? ApiError(405, "method " + req.method + " not allowed on " + req.path)
                           : ApiError(404, "no route " + req.method + " " + req.path);
  deny(req, res, e, style_of(req.path));
}

void HttpServer::refuse(const HttpRequest& head, int status, const std::string& message,
                        HttpResponse& res) {
  deny(head, res, ApiError(status, message), style_of(head.path));
}

void HttpServer::deny(const HttpRequest& req, HttpResponse& res, const ApiError& e,
                      ErrorStyle style) {
  metrics_.request(req.path, e.status);
  send_error(req, res, e, style);
}

void HttpServer::start() {
  port_ = transport_.bind(opt_.host, opt_.port);
  if (!loopback_bind(opt_.host))
    spdlog::warn(
        "listening on {}, not loopback: other machines can connect, and the Host header is not "
        "checked (no DNS rebinding defence){}",
        opt_.host, opt_.api_key.empty() ? "; no --api-key is set" : "");
  transport_.start();
}

void HttpServer::ready(Scheduler& s, ApiContext ctx) {
  ctx_ = std::move(ctx);
  scheduler_.store(&s);
}

void HttpServer::stop() {
  stopping_ = true;  // the jobs' loops cancel them and end their responses
  transport_.stop(kDrain);
}

ojson HttpServer::json_body(const HttpRequest& req) {
  try {
    return parse_json_text(req.body, "the body");
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
}

void HttpServer::get(const std::string& path, Handler h) {
  routes_[path].get = std::move(h);
}

void HttpServer::post(const std::string& path, Handler h) {
  routes_[path].post = std::move(h);
}

HttpServer::Handler HttpServer::handler(const std::string& endpoint, ErrorStyle style, Handler f) {
  metrics_.endpoint(endpoint);
  return [this, endpoint, style, f](const HttpRequest& req, HttpResponse& res) {
    try {
      f(req, res);
    } catch (const ApiError& e) {
      res.stream = nullptr;
      send_error(req, res, e, style);
    } catch (const std::exception& e) {
      res.stream = nullptr;
      send_error(req, res, ApiError(500, e.what()), style);
    }
    metrics_.request(endpoint, res.status);
  };
}

void HttpServer::serve_job(const HttpRequest& req, HttpResponse& res, const std::string& endpoint,
                           Request r, bool stream, std::shared_ptr<JobWriter> w) {
  Scheduler* sched = scheduler();
  if (!sched) throw ApiError(503, "the model is still loading");
  const auto t0 = Clock::now();
  // The log line and metrics, however the request ends (a client gone included).
  auto on_end = [this, endpoint, t0](const Job& job, const Job::Event& e) {
    const auto started = job.started().value_or(t0);
    if (!e.result) {
      spdlog::warn("request id={} endpoint={} failed: {}", job.request().id, endpoint, e.error);
      return;
    }
    const Result& out = *e.result;
    metrics_.generation(out);
    spdlog::info(
        "request id={} endpoint={} prompt={} cached={} disk={} completion={} queue_ms={:.1f} "
        "ttft_ms={:.1f} decode_tok_s={:.1f} finish={} cache_left_at={}",
        job.request().id, endpoint, out.prompt_tokens, out.cached_tokens, out.disk_tokens,
        out.completion_tokens, std::chrono::duration<double, std::milli>(started - t0).count(),
        out.ttft_s * 1e3, out.decode_tok_s(), finish_name(out.finish), out.cache_left_at);
  };
  auto job = sched->submit(std::move(r), on_end);
  if (!job) throw ApiError(429, "the server is busy: too many requests are queued");
  const auto connected = req.connected;
  static constexpr auto kPoll = std::chrono::milliseconds(20);
  auto answer = std::make_shared<ParsedDelta>();  // all of it, for the next turn
  auto ended = [this, sched, job, answer](const Job::Event& e) {
    if (opt_.idle_prefill) prefill_next_turn(*sched, *job, e, *answer, ctx_.ctx_size, metrics_);
  };
  if (!stream) {
    for (;;) {
      auto e = job->next(kPoll);
      if (!e || e->delta) {
        if (e) {
          answer->append(ParsedDelta(e->delta->chat));
          w->delta(*e->delta);
        }
        // After every token too: a model faster than the poll never leaves the
        // queue idle, and a gone client must still cancel within one step.
        if (!connected() || stopping_) job->cancel();
        continue;
      }
      if (!e->error.empty()) throw ApiError(500, e->error);
      res.set_content(w->end(*e->result), w->content_type(false));
      ended(*e);
      return;
    }
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.content_type = w->content_type(true);
  res.stream = [this, job, w, connected, answer, ended](ResponseSink& sink) {
    auto write = [&](const std::string& s) { return s.empty() || sink.write(s); };
    if (!write(w->begin())) return job->cancel();  // the client is gone
    for (;;) {
      if (stopping_) job->cancel();  // its end still comes, and is written
      auto e = job->next(kPoll);
      if (!e) {
        if (!connected()) return job->cancel();
        continue;
      }
      if (e->delta) {
        answer->append(ParsedDelta(e->delta->chat));
        if (!write(w->delta(*e->delta)) || !connected()) return job->cancel();
        continue;
      }
      write(e->error.empty() ? w->end(*e->result) : w->failed(e->error));
      return ended(*e);
    }
  };
}

void HttpServer::add_routes() {
  // Agents probe the root before their first request (GET, and HEAD through GET).
  get("/", [](const HttpRequest&, HttpResponse& res) {
    res.set_content(ojson{{"name", "tern"}, {"status", "ok"}}.dump(), "application/json");
  });
  get("/health", [this](const HttpRequest&, HttpResponse& res) {
    const bool up = scheduler() != nullptr;
    res.status = up ? 200 : 503;
    res.set_content(ojson{{"status", up ? "ok" : "loading"}}.dump(), "application/json");
  });
  get("/metrics",
      handler("/metrics", ErrorStyle::openai, [this](const HttpRequest&, HttpResponse& res) {
        res.set_content(metrics_.render(), "text/plain; version=0.0.4");
      }));
}

}  // namespace tern::server
