#include "server/http_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>

#include "core/json_text.h"
#include "server/openai_response.h"
#include "server/peer_socket.h"

namespace tern::server {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollStart = std::chrono::milliseconds(5);

// Counts a request answered from a job while it lasts (stop() waits for them).
struct JobCount {
  explicit JobCount(std::atomic<int>& n) : n_(n) { ++n_; }
  ~JobCount() { --n_; }
  JobCount(const JobCount&) = delete;
  JobCount& operator=(const JobCount&) = delete;
  std::atomic<int>& n_;
};

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

// The declared Content-Length (0 without one; unreadable: as large as can be).
uint64_t content_length(const httplib::Request& req) {
  const std::string v = req.get_header_value("Content-Length");
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  return v.empty() ? 0 : ec != std::errc() || end != v.data() + v.size() ? UINT64_MAX : n;
}

// Whether a client's key is the key (not empty), in time that depends on the
// given text's length only, not on where it first differs.
bool same_secret(std::string_view given, std::string_view key) {
  size_t diff = given.size() ^ key.size();
  for (size_t i = 0; i < given.size(); ++i)
    diff |= size_t(uint8_t(given[i]) ^ uint8_t(key[i % key.size()]));
  return diff == 0;
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
      sched.engine().cache().budget() == 0)
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

void send_error(const httplib::Request& req, httplib::Response& res, const ApiError& e,
                ErrorStyle style) {
  // One warning line per refusal: the client's x-request-id (else a new
  // id), endpoint, status and message, JSON-quoted so that nothing a client
  // sent can start a line of its own. Never the body or the key.
  std::string id = req.get_header_value("x-request-id");
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

HttpServer::HttpServer(const ServeOptions& o, Metrics& metrics) : opt_(o), metrics_(metrics) {
  srv_.new_task_queue = [n = o.threads] { return new httplib::ThreadPool(size_t(n)); };
  srv_.set_payload_max_length(o.max_body);
  srv_.set_tcp_nodelay(true);  // a streamed token must not wait for the last one's ACK (Nagle)
  srv_.set_read_timeout(60, 0);
  srv_.set_write_timeout(60, 0);
  srv_.set_logger([](const httplib::Request&, const httplib::Response&) {
    Connections::linger_if_closing();  // runs once the response is written
  });
  srv_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    connections_.enter(req);
    return admit(req, res) ? httplib::Server::HandlerResponse::Unhandled
                           : httplib::Server::HandlerResponse::Handled;
  });
  srv_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413)
      send_error(req, res, ApiError(413, "the request body is larger than the server accepts"));
    else if (res.status == 404)
      send_error(req, res, ApiError(404, "no route " + req.method + " " + req.path));
    else if (res.status == 405)
      send_error(req, res, ApiError(405, "method " + req.method + " not allowed on " + req.path));
    else if (res.status >= 400)
      send_error(req, res, ApiError(res.status, "the request could not be read"));
  });
  srv_.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
        send_error(req, res, ApiError(500, "internal error"));
      });
  add_routes();
}

HttpServer::~HttpServer() {
  stop();
}

bool HttpServer::admit(const httplib::Request& req, httplib::Response& res) {
  // DNS rebinding: a page on another name that resolves to 127.0.0.1.
  // No Host at all is an HTTP/1.0 client, never a browser.
  if (loopback_bind(opt_.host) && req.has_header("Host") &&
      !loopback_host(req.get_header_value("Host"))) {
    send_error(req, res,
               ApiError(403, "Host '" + req.get_header_value("Host") + "' is not allowed"));
    return false;
  }
  const std::string origin = req.get_header_value("Origin");
  if (!origin.empty()) {
    if (!origin_allowed(origin, opt_.cors_origins)) {
      send_error(req, res,
                 ApiError(403, "origin '" + origin + "' is not allowed (see --cors-origin)"));
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
  if (opt_.api_key.empty() || req.path == "/health") return body_acceptable(req, res);
  const std::string auth = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  const bool bearer = std::string_view(auth).starts_with(kBearer);
  if ((bearer && same_secret(std::string_view(auth).substr(kBearer.size()), opt_.api_key)) ||
      same_secret(req.get_header_value("x-api-key"), opt_.api_key))
    return body_acceptable(req, res);
  const bool anthropic = req.path.starts_with("/v1/messages");
  metrics_.request(req.path, 401);
  send_error(req, res,
             ApiError(401, auth.empty() && !req.has_header("x-api-key") ? "missing API key"
                                                                        : "invalid API key"),
             anthropic ? ErrorStyle::anthropic : ErrorStyle::openai);
  // A refused body is not read (only drained, briefly, as the connection closes).
  if (req.has_header("Transfer-Encoding") || content_length(req) > 0) {
    res.set_header("Connection", "close");
    Connections::close_after_response();
  }
  return false;
}

bool HttpServer::body_acceptable(const httplib::Request& req, httplib::Response& res) {
  // Refused before it is read (httplib would read and discard all of it).
  if (content_length(req) <= opt_.max_body) return true;
  metrics_.request(req.path, 413);
  send_error(req, res, ApiError(413, "the request body is larger than the server accepts"));
  res.set_header("Connection", "close");
  Connections::close_after_response();
  return false;
}

void HttpServer::start() {
  port_ = opt_.port == 0 ? srv_.bind_to_any_port(opt_.host) : opt_.port;
  if (port_ < 0 || (opt_.port != 0 && !srv_.bind_to_port(opt_.host, opt_.port)))
    fail("cannot listen on {}:{}", opt_.host, opt_.port);
  if (!loopback_bind(opt_.host))
    spdlog::warn(
        "listening on {}, not loopback: other machines can connect, and the Host header is not "
        "checked (no DNS rebinding defence){}",
        opt_.host, opt_.api_key.empty() ? "; no --api-key is set" : "");
  thread_ = std::thread([this] {
    srv_.listen_after_bind();
    listening_done_ = true;
  });
  // stop() is a no-op until the server runs: wait, or an error right after
  // start() would leave the listening thread to be joined forever.
  while (!srv_.is_running() && !listening_done_) std::this_thread::sleep_for(kPollStart);
}

void HttpServer::ready(Scheduler& s, ApiContext ctx) {
  ctx_ = std::move(ctx);
  scheduler_.store(&s);
}

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;  // the jobs' loops cancel them and end their responses
  srv_.stop();
  const auto deadline = Clock::now() + kDrain;
  while ((jobs_ > 0 || !listening_done_) && Clock::now() < deadline)
    std::this_thread::sleep_for(kPollStart);
  connections_.shutdown_all();  // idle keep-alive, slow and stalled clients
  thread_.join();
}

ojson HttpServer::json_body(const httplib::Request& req) {
  try {
    return parse_json_text(req.body, "the body");
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
}

void HttpServer::post(const std::string& path, httplib::Server::Handler h) {
  srv_.Post(path, [this, h](const httplib::Request& req, httplib::Response& res,
                            const httplib::ContentReader& read) {
    httplib::Request full = req;
    bool too_large = false;
    const bool ok = read([&](const char* data, size_t n) {
      too_large = full.body.size() + n > opt_.max_body;
      if (!too_large) full.body.append(data, n);
      return !too_large;  // stops reading
    });
    if (!ok) {
      metrics_.request(req.path, too_large ? 413 : 400);
      send_error(req, res,
                 too_large ? ApiError(413, "the request body is larger than the server accepts")
                           : ApiError(400, "the request body could not be read"));
      res.set_header("Connection", "close");  // the rest of the body is not a next request
      Connections::close_after_response();
      return;
    }
    h(full, res);
  });
}

httplib::Server::Handler HttpServer::handler(
    const std::string& endpoint, ErrorStyle style,
    std::function<void(const httplib::Request&, httplib::Response&)> f) {
  metrics_.endpoint(endpoint);
  return [this, endpoint, style, f](const httplib::Request& req, httplib::Response& res) {
    try {
      f(req, res);
    } catch (const ApiError& e) {
      send_error(req, res, e, style);
    } catch (const std::exception& e) {
      send_error(req, res, ApiError(500, e.what()), style);
    }
    metrics_.request(endpoint, res.status == -1 ? 200 : res.status);  // httplib sets 200 later
  };
}

void HttpServer::serve_job(const httplib::Request& req, httplib::Response& res,
                           const std::string& endpoint, Request r, bool stream,
                           std::shared_ptr<JobWriter> w) {
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
        "request id={} endpoint={} prompt={} cached={} completion={} queue_ms={:.1f} "
        "ttft_ms={:.1f} decode_tok_s={:.1f} finish={} cache_left_at={}",
        job.request().id, endpoint, out.prompt_tokens, out.cached_tokens, out.completion_tokens,
        std::chrono::duration<double, std::milli>(started - t0).count(), out.ttft_s * 1e3,
        out.decode_tok_s(), finish_name(out.finish), out.cache_left_at);
  };
  auto job = sched->submit(std::move(r), on_end);
  if (!job) throw ApiError(429, "the server is busy: too many requests are queued");
  auto counted = std::make_shared<JobCount>(jobs_);
  auto peer = std::make_shared<PeerSocket>(req.remote_addr, req.remote_port, req.local_port);
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
        if (!peer->alive() || stopping_) job->cancel();
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
  auto begun = std::make_shared<bool>(false);
  res.set_chunked_content_provider(
      w->content_type(true),
      [this, job, w, peer, begun, answer, ended](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) {
          return s.empty() || sink.write(s.data(), s.size());
        };
        auto drop = [&] {  // the client is gone
          job->cancel();
          return false;
        };
        if (!*begun) {
          *begun = true;
          if (!write(w->begin())) return drop();
        }
        for (;;) {
          if (stopping_) job->cancel();  // its end still comes, and is written
          auto e = job->next(kPoll);
          if (!e) {
            if (!peer->alive()) return drop();
            continue;
          }
          if (e->delta) {
            answer->append(ParsedDelta(e->delta->chat));
            if (!write(w->delta(*e->delta)) || !peer->alive()) return drop();
            continue;
          }
          write(e->error.empty() ? w->end(*e->result) : w->failed(e->error));
          sink.done();
          ended(*e);
          return true;
        }
      },
      [job, counted](bool) { job->cancel(); });  // a no-op when it has finished
}

void HttpServer::add_routes() {
  // Agents probe the root before their first request (GET, and HEAD through GET).
  srv_.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(ojson{{"name", "tern"}, {"status", "ok"}}.dump(), "application/json");
  });
  srv_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool up = scheduler() != nullptr;
    res.status = up ? 200 : 503;
    res.set_content(ojson{{"status", up ? "ok" : "loading"}}.dump(), "application/json");
  });
  srv_.Get("/metrics", handler("/metrics", ErrorStyle::openai,
                               [this](const httplib::Request&, httplib::Response& res) {
                                 res.set_content(metrics_.render(), "text/plain; version=0.0.4");
                               }));
}

}  // namespace tern::server
