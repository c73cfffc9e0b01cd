#include "server/peer_socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <filesystem>

namespace tern::server {

namespace {

// The address and port of a socket end, as httplib writes them.
bool address(int fd, bool peer, std::string& addr, int& port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if ((peer ? getpeername : getsockname)(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    return false;
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  addr = buf;
  return true;
}

}  // namespace

PeerSocket::PeerSocket(const std::string& remote_addr, int remote_port, int local_port)
    : remote_addr_(remote_addr), remote_port_(remote_port), local_port_(local_port) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(e.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    if (same_peer(fd)) {
      fd_ = fd;
      return;
    }
  }
}

bool PeerSocket::same_peer(int fd) const {
  std::string addr, local;
  int port = 0, lport = 0;
  return address(fd, true, addr, port) && port == remote_port_ && addr == remote_addr_ &&
         address(fd, false, local, lport) && lport == local_port_;
}

bool PeerSocket::alive() const {
  if (fd_ < 0) return true;
  if (!same_peer(fd_)) return false;  // closed, its number taken by another connection
  char c;
  const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return true;
  if (n == 0) return false;  // orderly shutdown
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

}  // namespace tern::server
