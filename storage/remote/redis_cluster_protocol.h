// What the Redis Cluster client reads out of replies: the slot map of a
// CLUSTER SLOTS reply, and MOVED / ASK redirections. Pure functions over
// hiredis replies (no I/O), so the cluster store stays about routing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "prefixkv/status.h"

struct redisReply;

namespace prefixkv {

inline constexpr int kRedisSlots = 16384;

// "host:port" split; "[::1]:7000" gives host "::1". REQUIRES: a valid seed
// (ParseRedisSeeds accepted it) or a node address a server sent.
struct RedisAddress {
  std::string host;
  int port = 0;
  std::string name() const;  // "host:port" again
};
StatusOr<RedisAddress> SplitRedisAddress(std::string_view address);

// One range of a CLUSTER SLOTS reply, served by `master`.
struct RedisSlotRange {
  int first = 0;
  int last = 0;
  RedisAddress master;
};

// The master ranges of a CLUSTER SLOTS reply (replicas are ignored). A master
// listed without an address ("" or "?") is `asked_host`, the node that sent
// the reply. IOError on a reply of another shape.
StatusOr<std::vector<RedisSlotRange>> ParseClusterSlots(const redisReply& reply,
                                                        const std::string& asked_host);

// True for the error a node with cluster mode off sends to CLUSTER SLOTS.
bool IsClusterDisabledError(const redisReply& reply);

// "-MOVED 3999 127.0.0.1:6381" or "-ASK 3999 127.0.0.1:6381": where the key
// lives now (MOVED: for good; ASK: for this command only). A host that is
// empty or "?" (no endpoint known: "-MOVED 3999 :6381", "-MOVED 3999 ?:6381")
// is `asked_host`. nullopt for any other reply.
struct RedisRedirect {
  bool ask = false;
  int slot = 0;
  RedisAddress target;
};
std::optional<RedisRedirect> ParseRedirect(const redisReply& reply,
                                           const std::string& asked_host);

// An error reply as a Status: Unavailable for the cluster's transient states
// (CLUSTERDOWN, TRYAGAIN, LOADING, MASTERDOWN), IOError for the rest, with
// the node's name and the server's message.
Status ErrorReplyStatus(const redisReply& reply, const std::string& node);

}  // namespace prefixkv
