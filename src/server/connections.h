// The sockets of the HTTP server's connections. cpp-httplib 0.11 gives
// handlers no socket and keeps no list of connections, so a stop could wait
// on a worker blocked in a read or write for the whole timeout. Each request
// notes its connection's socket (found by its addresses, see PeerSocket) for
// the worker thread serving it; shutdown_all() makes every blocked read and
// write return.
#pragma once

#include <httplib.h>

#include <map>
#include <mutex>
#include <thread>

namespace tern::server {

class Connections {
 public:
  // From the pre-routing handler: this worker thread now serves req's connection.
  void enter(const httplib::Request& req);
  void shutdown_all();
  // This thread's connection closes once the response is written, after
  // the rest of a refused body is drained for at most kLinger (a close with
  // unread data resets the connection, and the client would lose the
  // refusal). Call with the response's "Connection: close" set.
  static void close_after_response();
  // From the server's logger, which runs once a response is written.
  static void linger_if_closing();
  static constexpr int kLingerMs = 1000;

 private:
  std::mutex m_;
  std::map<std::thread::id, int> fds_;  // a worker's latest connection
};

}  // namespace tern::server
