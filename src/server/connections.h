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
  // This thread's connection reads nothing more (the rest of a refused
  // body), and closes once the response is written.
  static void stop_reading_current();

 private:
  std::mutex m_;
  std::map<std::thread::id, int> fds_;  // a worker's latest connection
};

}  // namespace tern::server
