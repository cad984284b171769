// A small blocking RESP2 client for tests: connects to 127.0.0.1, sends raw
// bytes or commands, and reads one reply at a time. Every read has a timeout so
// a server bug fails the test instead of hanging it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace prefixkv::testing {

struct Reply {
  char type = 0;             // '+', '-', ':', '$', '*'; 0: connection closed
  std::string str;           // simple string, error or bulk payload
  int64_t integer = 0;       // ':' value, or the length for '$' and '*'
  bool null = false;         // "$-1" or "*-1"
  std::vector<Reply> elems;  // '*'

  bool closed() const { return type == 0; }
  bool IsError() const { return type == '-'; }
};

// Encodes a command as a RESP array of bulk strings.
inline std::string EncodeCommand(const std::vector<std::string>& words) {
  std::string out = "*" + std::to_string(words.size()) + "\r\n";
  for (const std::string& w : words)
    out += "$" + std::to_string(w.size()) + "\r\n" + w + "\r\n";
  return out;
}

// Not thread-safe; one per test thread.
class RespClient {
 public:
  explicit RespClient(uint16_t port, int timeout_s = 20) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{timeout_s, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RespClient() { ::close(fd_); }
  RespClient(const RespClient&) = delete;
  RespClient& operator=(const RespClient&) = delete;

  bool connected() const { return connected_; }

  bool SendRaw(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Tells the server this client sends nothing more (a half close).
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }

  // Sends one command and reads its reply.
  Reply Call(const std::vector<std::string>& words) {
    if (!SendRaw(EncodeCommand(words))) return Reply{};
    return Read();
  }

  // Reads one reply; type 0 when the connection closed (or timed out).
  Reply Read() {
    Reply r;
    std::optional<std::string> line = ReadLine();
    if (!line || line->empty()) return r;
    r.type = (*line)[0];
    std::string rest = line->substr(1);
    if (r.type == '+' || r.type == '-') {
      r.str = rest;
    } else if (r.type == ':') {
      r.integer = std::stoll(rest);
    } else if (r.type == '$') {
      r.integer = std::stoll(rest);
      r.null = r.integer < 0;
      if (!r.null && !ReadExact(static_cast<size_t>(r.integer) + 2, &r.str))
        return Reply{};
      if (!r.null) r.str.resize(static_cast<size_t>(r.integer));
    } else if (r.type == '*') {
      r.integer = std::stoll(rest);
      r.null = r.integer < 0;
      for (int64_t i = 0; i < r.integer; ++i) {
        r.elems.push_back(Read());
        if (r.elems.back().closed()) return Reply{};
      }
    }
    return r;
  }

  // The next `n` bytes as they come, whatever they are (part of a reply).
  bool ReadBytes(size_t n, std::string* out) { return ReadExact(n, out); }

  // Bytes the kernel holds for this client, not read yet.
  size_t BytesWaiting() const {
    int n = 0;
    return ::ioctl(fd_, FIONREAD, &n) == 0 && n > 0 ? static_cast<size_t>(n) : 0;
  }

  // True when the server closed the connection, after whatever it had sent
  // (end-of-file, or a reset); false when it stays open past the timeout.
  bool ReadsEofAfterDraining() {
    char buf[65536];
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }

  // True when the server closed the connection (reads end-of-file).
  bool ReadsEof() {
    char c;
    return ::recv(fd_, &c, 1, 0) == 0;
  }

 private:
  bool Fill() {
    char buf[65536];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    buf_.append(buf, static_cast<size_t>(n));
    return true;
  }
  std::optional<std::string> ReadLine() {
    size_t pos;
    while ((pos = buf_.find("\r\n")) == std::string::npos) {
      if (!Fill()) return std::nullopt;
    }
    std::string line = buf_.substr(0, pos);
    buf_.erase(0, pos + 2);
    return line;
  }
  bool ReadExact(size_t n, std::string* out) {
    while (buf_.size() < n) {
      if (!Fill()) return false;
    }
    *out = buf_.substr(0, n);
    buf_.erase(0, n);
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

}  // namespace prefixkv::testing
