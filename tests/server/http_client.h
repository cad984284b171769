// A blocking HTTP/1.1 client for the metrics tests: one loopback connection,
// raw requests in, one response (body by Content-Length) out at a time. Every
// read has a timeout so a server bug fails the test instead of hanging it.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace prefixkv::testing {

struct HttpResponse {
  int status = 0;  // 0: no response (closed or timed out)
  std::string headers;
  std::string body;
};

// Not thread-safe; one per thread.
class HttpConnection {
 public:
  explicit HttpConnection(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~HttpConnection() { ::close(fd_); }

  bool connected() const { return connected_; }

  void Send(const std::string& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }

  // Reads one response (its body by Content-Length).
  HttpResponse Read() {
    HttpResponse r;
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return r;
    }
    r.headers = buf_.substr(0, end + 2);
    buf_.erase(0, end + 4);
    r.status = std::atoi(r.headers.c_str() + r.headers.find(' ') + 1);
    const std::string cl = "Content-Length: ";
    size_t at = r.headers.find(cl);
    size_t length =
        at == std::string::npos ? 0 : std::stoul(r.headers.substr(at + cl.size()));
    while (buf_.size() < length) {
      if (!Fill()) return HttpResponse{};
    }
    r.body = buf_.substr(0, length);
    buf_.erase(0, length);
    return r;
  }

  HttpResponse Request(const std::string& method, const std::string& target) {
    Send(method + " " + target + " HTTP/1.1\r\nHost: localhost\r\n\r\n");
    return Read();
  }

  // Sends without failing the test when the server has closed the connection.
  bool TrySend(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }

  // True when the server has closed the connection (or reset it) by now;
  // does not wait.
  bool ClosedByServer() {
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

  // True when the server closed the connection.
  bool ReadsEof() {
    char c;
    return buf_.empty() && ::recv(fd_, &c, 1, 0) == 0;
  }

 private:
  bool Fill() {
    char buf[65536];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    buf_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

}  // namespace prefixkv::testing
