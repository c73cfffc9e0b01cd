// HTTP/1.1 connections on Boost.Beast and Asio, built so that slow, idle or
// hostile clients cannot starve the server: one I/O thread reads every
// connection asynchronously (an idle or slow client holds no thread), each
// request is read within deadlines (the head, then the body) and limits
// (header bytes, body bytes whatever the framing, bodies held in total),
// connections are capped in total and per client address (the oldest idle
// or still-sending one makes room; a request being answered is never
// dropped), and only whole requests reach the workers that answer them.
// Keep-alive, pipelining, Expect: 100-continue and HEAD work as HTTP/1.1 says.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "server/http_message.h"

namespace tern::server {

// What the transport serves.
class HttpService {
 public:
  virtual ~HttpService() = default;
  // After the head, before the body is read (I/O thread; quick): false
  // refuses with res, and the body is never read (only drained briefly).
  virtual bool admit(const HttpRequest& head, HttpResponse& res) = 0;
  // Whether answer() is quick enough for the I/O thread (else a worker runs it).
  virtual bool quick(const HttpRequest& req) const = 0;
  virtual void answer(const HttpRequest& req, HttpResponse& res) = 0;
  // A request the transport refuses (head too large, body too large or too
  // slow): the error in the API's shape. head may hold no method or path.
  virtual void refuse(const HttpRequest& head, int status, const std::string& message,
                      HttpResponse& res) = 0;
};

struct HttpLimits {
  using seconds = std::chrono::seconds;
  size_t max_body = size_t(32) << 20;
  size_t max_header_bytes = size_t(64) << 10;  // request line and header lines together
  int max_connections = 512;                   // open at once (capped by the fd limit)
  int max_client_connections = 64;             // from one client address
  seconds idle_timeout{30};                    // keep-alive: waiting for a request to start
  seconds header_timeout{10};                  // its head, from its first byte
  seconds body_timeout{60};                    // its body, after the head
  seconds write_timeout{60};                   // each write of a response
  int workers = 16;                            // threads answering requests
  // Bodies held at once (being read or waiting for a worker): past it, the
  // largest one still being read is refused (413).
  size_t bodies_budget() const { return std::max(4 * max_body, size_t(256) << 20); }
};

class HttpTransport {
 public:
  HttpTransport(HttpService& service, const HttpLimits& limits);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds (throws with the reason when it cannot) and returns the port.
  int bind(const std::string& host, int port);
  // Accepts and answers in background threads until stop().
  void start();
  // Stops accepting and closes idle connections at once; requests being
  // answered get up to `drain` to end (their service is told to wind them
  // up), then every connection is shut.
  void stop(std::chrono::milliseconds drain);

  int open_connections() const;
  uint64_t evicted_connections() const;  // closed to make room for others

  struct Impl;  // the io_context, the connections and the workers

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tern::server
