// Loopback sockets for tests that play a server or need a port nobody
// answers on: a listening socket on 127.0.0.1 with a kernel-chosen port, a
// port that was free a moment ago (bound once, then released) and a port held
// refusing connections.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace prefixkv::testing {

// A socket bound to 127.0.0.1 on a free port (stored in *port), listening
// when `backlog` > 0. -1 on failure. `flags` go to socket() (e.g.
// SOCK_NONBLOCK). The caller closes it.
inline int BindLoopback(int* port, int backlog = 0, int flags = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | flags, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      (backlog > 0 && ::listen(fd, backlog) != 0) ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

// A loopback port nobody listens on (bound once, then released); 0 on failure.
// Released, it may be bound by another process (a server of a test running in
// parallel) before it is used: for a port to stay refused, RefusingLoopbackPort.
inline int ClosedLoopbackPort() {
  int port = 0;
  const int fd = BindLoopback(&port);
  if (fd < 0) return 0;
  ::close(fd);
  return port;
}

// A loopback port that refuses connections while this object lives: bound,
// never listening, so no other process can take it meanwhile. port() is 0 on
// failure.
class RefusingLoopbackPort {
 public:
  RefusingLoopbackPort() : fd_(BindLoopback(&port_)) {}
  ~RefusingLoopbackPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  RefusingLoopbackPort(const RefusingLoopbackPort&) = delete;
  RefusingLoopbackPort& operator=(const RefusingLoopbackPort&) = delete;

  int port() const { return fd_ >= 0 ? port_ : 0; }

 private:
  int port_ = 0;
  int fd_ = -1;
};

}  // namespace prefixkv::testing
