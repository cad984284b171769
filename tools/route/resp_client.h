// A blocking RESP client for the router's event feeds and its tests: one
// connection, one command at a time, replies as plain values (hiredis stays
// inside resp_client.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "prefixkv/status.h"

namespace prefixkv::route {

// One RESP2 reply.
struct RespValue {
  enum class Type { kString, kStatus, kError, kInteger, kNil, kArray };
  Type type = Type::kNil;
  std::string str;  // kString, kStatus, kError
  int64_t integer = 0;
  std::vector<RespValue> elements;  // kArray
  // Bulk and status strings as they are, integers in decimal, arrays space-separated.
  std::string Text() const;
};

// Not thread-safe: one thread uses a client.
class RespClient {
 public:
  // IOError when the connection fails within timeout_ms.
  static StatusOr<std::unique_ptr<RespClient>> Connect(const std::string& host, int port,
                                                       uint32_t timeout_ms);
  ~RespClient();
  RespClient(const RespClient&) = delete;
  RespClient& operator=(const RespClient&) = delete;

  // Sends a command and waits up to the reply timeout (Connect's unless set).
  // An error reply is a RespValue of kError; IOError when the connection
  // failed or timed out (the client is then unusable).
  StatusOr<RespValue> Command(const std::vector<std::string>& args);
  Status SetTimeout(uint32_t timeout_ms);

 private:
  RespClient() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixkv::route
