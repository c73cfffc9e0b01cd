// The HTTP side of tern serve, over the transport in http_transport.h: safe
// defaults (loopback; the Host header checked against DNS rebinding; browser
// origins limited to loopback unless --cors-origin allows more; an API key
// when set, checked before a body is read), error objects with the right
// status, /health (503 while the model loads), /metrics, the routes, and the
// machinery every generating endpoint shares: submit to the engine's queue
// (429 when full), then stream the job's output or wait for it, cancelling
// it when the client goes away.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "server/api_error.h"
#include "server/http_message.h"
#include "server/http_transport.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace tern::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;                    // empty: none required
  std::vector<std::string> cors_origins;  // beyond loopback ones; "*" allows any
  HttpLimits limits;
  bool idle_prefill = true;  // prefill a chat's likely next turn while idle
};

// Errors as each API writes them, each with one warning line in the log.
void send_error(const HttpRequest& req, HttpResponse& res, const ApiError& e,
                ErrorStyle style = ErrorStyle::openai);

// How an API turns a job's output into bytes.
class JobWriter {
 public:
  virtual ~JobWriter() = default;
  virtual std::string content_type(bool stream) const = 0;
  virtual std::string begin() { return ""; }               // stream: first bytes
  virtual std::string delta(const Delta& d) = 0;           // stream: bytes; whole: keep it
  virtual std::string end(const Result& r) = 0;            // stream: last bytes; whole: the body
  virtual std::string failed(const std::string& msg) = 0;  // stream: an error event
  virtual ErrorStyle errors() const { return ErrorStyle::openai; }
};

class HttpServer : private HttpService {
 public:
  using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;

  HttpServer(const ServeOptions& o, Metrics& metrics);
  ~HttpServer() override;
  // Binds (throws on failure) and answers in the background; every model
  // endpoint says 503 until ready().
  void start();
  void ready(Scheduler& s, ApiContext ctx);
  // Stops within about kDrain: no new connections; open requests have their
  // jobs cancelled and end well-formed (a stream with its last event); then
  // every connection is shut, however slow its client.
  void stop();
  static constexpr std::chrono::milliseconds kDrain{1000};
  int port() const { return port_; }

  // For the API modules: their routes, and what they share. A GET route is
  // answered on the I/O thread (keep it quick); a POST route by a worker,
  // once its whole body is read (never more than --max-body, whatever its
  // framing). HEAD is answered as GET without the body.
  void get(const std::string& path, Handler h);
  void post(const std::string& path, Handler h);
  // The engine and context once loaded (nullptr before: answer 503).
  Scheduler* scheduler() const { return scheduler_.load(); }
  const ApiContext& context() const { return ctx_; }
  Metrics& metrics() { return metrics_; }
  // The body as JSON (400 on malformed JSON or invalid UTF-8).
  static ojson json_body(const HttpRequest& req);
  // Submits r and answers with its output through w (streamed or whole).
  void serve_job(const HttpRequest& req, HttpResponse& res, const std::string& endpoint, Request r,
                 bool stream, std::shared_ptr<JobWriter> w);
  // Wraps a handler: ApiError and other exceptions become error responses,
  // the request is counted by endpoint and status.
  Handler handler(const std::string& endpoint, ErrorStyle style, Handler f);

 private:
  // HttpService: Host, Origin and key; the routes; the transport's refusals.
  bool admit(const HttpRequest& head, HttpResponse& res) override;
  bool quick(const HttpRequest& req) const override;
  void answer(const HttpRequest& req, HttpResponse& res) override;
  void refuse(const HttpRequest& head, int status, const std::string& message,
              HttpResponse& res) override;
  void add_routes();
  // A refusal: counted by path and status, then the error in `style`.
  void deny(const HttpRequest& req, HttpResponse& res, const ApiError& e, ErrorStyle style);

  struct Route {
    Handler get, post;
  };
  ServeOptions opt_;
  Metrics& metrics_;
  std::map<std::string, Route> routes_;
  HttpTransport transport_;
  std::atomic<bool> stopping_{false};
  int port_ = 0;
  std::atomic<Scheduler*> scheduler_{nullptr};
  ApiContext ctx_;
};

}  // namespace tern::server
