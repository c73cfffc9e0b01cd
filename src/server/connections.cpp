#include "server/connections.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <utility>

#include "server/peer_socket.h"

namespace tern::server {

namespace {

// The connection this worker thread serves (httplib runs each on one thread,
// its requests one after another).
thread_local std::optional<PeerSocket> current;
thread_local bool closing = false;

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

void Connections::close_after_response() {
  closing = true;
}

void Connections::linger_if_closing() {
  if (!std::exchange(closing, false) || !current || current->fd() < 0) return;
  const int fd = current->fd();
  ::shutdown(fd, SHUT_WR);  // the response is whole: the client sees its end
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLingerMs);
  char sink[1 << 16];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) break;
    if (::recv(fd, sink, sizeof sink, 0) <= 0) break;  // the client closed, or an error
  }
}

}  // namespace tern::server
