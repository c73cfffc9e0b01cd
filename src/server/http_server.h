// The HTTP side of tern serve, on cpp-httplib: safe defaults (loopback; the
// Host header checked against DNS rebinding; browser origins limited to
// loopback unless --cors-origin allows more; an API key when set; bounded
// bodies), error objects with the right status, /health (503 while the model
// loads), /metrics, and the machinery every generating endpoint shares:
// submit to the engine's queue (429 when full), then stream the job's output
// or wait for it, cancelling it when the client goes away.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "server/api_error.h"
#include "server/connections.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace tern::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;                    // empty: none required
  std::vector<std::string> cors_origins;  // beyond loopback ones; "*" allows any
  size_t max_body = size_t(32) << 20;
  int threads = 16;
  bool idle_prefill = true;  // prefill a chat's likely next turn while idle
};

// Errors as each API writes them, each with one warning line in the log.
void send_error(const httplib::Request& req, httplib::Response& res, const ApiError& e,
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

class HttpServer {
 public:
  HttpServer(const ServeOptions& o, Metrics& metrics);
  ~HttpServer();
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

  // For the API modules: their routes, and what they share.
  httplib::Server& http() { return srv_; }
  // The engine and context once loaded (nullptr before: answer 503).
  Scheduler* scheduler() const { return scheduler_.load(); }
  const ApiContext& context() const { return ctx_; }
  Metrics& metrics() { return metrics_; }
  // The body as JSON (400 on malformed JSON or invalid UTF-8).
  static ojson json_body(const httplib::Request& req);
  // Submits r and answers with its output through w (streamed or whole).
  void serve_job(const httplib::Request& req, httplib::Response& res, const std::string& endpoint,
                 Request r, bool stream, std::shared_ptr<JobWriter> w);
  // A POST route: its body read by the server (never more than --max-body,
  // whatever its framing: Content-Length or chunked), then h.
  void post(const std::string& path, httplib::Server::Handler h);
  // Wraps a handler: ApiError and other exceptions become error responses,
  // the request is counted by endpoint and status.
  httplib::Server::Handler handler(
      const std::string& endpoint, ErrorStyle style,
      std::function<void(const httplib::Request&, httplib::Response&)> f);

 private:
  bool admit(const httplib::Request& req, httplib::Response& res);            // Host, Origin, key
  bool body_acceptable(const httplib::Request& req, httplib::Response& res);  // its length
  void add_routes();

  ServeOptions opt_;
  Metrics& metrics_;
  Connections connections_;
  httplib::Server srv_;
  std::thread thread_;
  std::atomic<bool> listening_done_{false}, stopping_{false};
  std::atomic<int> jobs_{0};  // requests being answered from a job
  int port_ = 0;
  std::atomic<Scheduler*> scheduler_{nullptr};
  ApiContext ctx_;
};

}  // namespace tern::server
