#include "server/connections.h"

#include <sys/socket.h>

#include <optional>

#include "server/peer_socket.h"

namespace tern::server {

namespace {

// The connection this worker thread serves (httplib runs each on one thread,
// its requests one after another).
thread_local std::optional<PeerSocket> current;

}  // namespace

void Connections::enter(const httplib::Request& req) {
  if (!current || !current->same_addresses(req.remote_addr, req.remote_port, req.local_port) ||
      current->fd() < 0)
    current.emplace(req.remote_addr, req.remote_port, req.local_port);
  std::lock_guard lock(m_);
  fds_[std::this_thread::get_id()] = current->fd();
}

void Connections::shutdown_all() {
  std::lock_guard lock(m_);
  for (const auto& [thread, fd] : fds_)
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
}

void Connections::stop_reading_current() {
  if (current && current->fd() >= 0) ::shutdown(current->fd(), SHUT_RD);
}

}  // namespace tern::server
