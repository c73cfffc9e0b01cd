// Whether the client of an HTTP request is still connected. cpp-httplib
// 0.11 gives handlers no socket and notices a closed connection only when a
// write fails, so the socket is found by its addresses (once per request)
// and peeked without blocking: a request whose client went away is
// cancelled at the next check, streaming or not, in prefill or decode.
#pragma once

#include <string>

namespace tern::server {

class PeerSocket {
 public:
  PeerSocket(const std::string& remote_addr, int remote_port, int local_port);
  // False once the peer has closed or reset the connection.
  bool alive() const;
  // The socket (-1: not found), while it is still this connection's.
  int fd() const { return fd_ >= 0 && same_peer(fd_) ? fd_ : -1; }
  bool same_addresses(const std::string& remote_addr, int remote_port, int local_port) const {
    return remote_addr == remote_addr_ && remote_port == remote_port_ && local_port == local_port_;
  }

 private:
  bool same_peer(int fd) const;
  std::string remote_addr_;
  int remote_port_, local_port_;
  int fd_ = -1;  // -1: not found (then always alive)
};

}  // namespace tern::server
