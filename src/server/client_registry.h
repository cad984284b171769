// The server's open clients, for CLIENT LIST / INFO / ID / SETNAME.
//
// Each connection holds a ClientRecord through a shared_ptr whose deleter takes
// it out of the registry, so a record is listed exactly while some connection
// state refers to it. What a record says is written by its connection's thread
// and read by any thread running CLIENT LIST: ids and addresses are fixed at
// creation, counters are atomics, the name is under the record's mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/advanced/mutex.h"

namespace prefixkv::server {

struct CommandSpec;

struct ClientRecord {
  uint64_t id = 0;    // CLIENT ID: unique in the server, from 1
  std::string addr;   // peer "ip:port" ("" without a socket)
  std::string laddr;  // local "ip:port"
  uint64_t created_ms = 0;
  std::atomic<uint64_t> last_command_ms{0};
  std::atomic<const CommandSpec*> last_command{nullptr};
  std::atomic<int64_t> multi{-1};  // commands queued in MULTI; -1: not in MULTI
  std::atomic<bool> admin{false};  // authenticated as "admin"

  std::string name() const {
    MutexLock lock(&mu_);
    return name_;
  }
  void set_name(std::string name) {
    MutexLock lock(&mu_);
    name_ = std::move(name);
  }

 private:
  mutable Mutex mu_;
  std::string name_ GUARDED_BY(mu_);
};

// Thread-safe.
class ClientRegistry : public std::enable_shared_from_this<ClientRegistry> {
 public:
  // A new record with the next id, listed until its last reference goes.
  std::shared_ptr<ClientRecord> Add(std::string addr, std::string laddr, uint64_t now_ms);
  // Every listed record, by id.
  std::vector<std::shared_ptr<const ClientRecord>> Snapshot() const;

 private:
  void Remove(uint64_t id);

  mutable Mutex mu_;
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  // Entries are removed by their deleter before they are freed.
  std::map<uint64_t, ClientRecord*> clients_ GUARDED_BY(mu_);
};

inline constexpr std::string_view kBadClientName =
    "ERR Client names cannot contain spaces, newlines or special characters.";

// A valid client name: printable ASCII without spaces ('!' to '~'), as Redis
// requires; empty clears the name.
bool ValidClientName(std::string_view name);

}  // namespace prefixkv::server
