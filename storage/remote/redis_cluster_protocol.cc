// Slot maps and redirections out of hiredis replies (redis_cluster_protocol.h).
#include "redis_cluster_protocol.h"

#include <hiredis/hiredis.h>

#include <charconv>

namespace prefixkv {
namespace {

std::string_view Text(const redisReply& reply) {
  return reply.str == nullptr ? std::string_view()
                              : std::string_view(reply.str, reply.len);
}

bool ParseInt(std::string_view text, int* value) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::string RedisAddress::name() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

StatusOr<RedisAddress> SplitRedisAddress(std::string_view address) {
  const size_t colon = address.rfind(':');
  RedisAddress out;
  if (colon == std::string_view::npos ||
      !ParseInt(address.substr(colon + 1), &out.port) || out.port <= 0 ||
      out.port > 65535) {
    return Status::InvalidArgument("bad redis address '" + std::string(address) + "'");
  }
  std::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  out.host = std::string(host);
  return out;
}

StatusOr<std::vector<RedisSlotRange>> ParseClusterSlots(const redisReply& reply,
                                                        const std::string& asked_host) {
  const Status bad = Status::IOError("CLUSTER SLOTS: unexpected reply shape");
  if (reply.type != REDIS_REPLY_ARRAY) return bad;
  std::vector<RedisSlotRange> ranges;
  for (size_t i = 0; i < reply.elements; ++i) {
    const redisReply& entry = *reply.element[i];
    if (entry.type != REDIS_REPLY_ARRAY || entry.elements < 3) return bad;
    const redisReply& first = *entry.element[0];
    const redisReply& last = *entry.element[1];
    const redisReply& master = *entry.element[2];
    if (first.type != REDIS_REPLY_INTEGER || last.type != REDIS_REPLY_INTEGER ||
        master.type != REDIS_REPLY_ARRAY || master.elements < 2 ||
        master.element[1]->type != REDIS_REPLY_INTEGER || first.integer < 0 ||
        last.integer >= kRedisSlots || first.integer > last.integer) {
      return bad;
    }
    RedisSlotRange range;
    range.first = static_cast<int>(first.integer);
    range.last = static_cast<int>(last.integer);
    std::string host(Text(*master.element[0]));
    range.master.host = host.empty() || host == "?" ? asked_host : host;
    range.master.port = static_cast<int>(master.element[1]->integer);
    ranges.push_back(std::move(range));
  }
  return ranges;
}

bool IsClusterDisabledError(const redisReply& reply) {
  return reply.type == REDIS_REPLY_ERROR &&
         Text(reply).find("cluster support disabled") != std::string_view::npos;
}

std::optional<RedisRedirect> ParseRedirect(const redisReply& reply,
                                           const std::string& asked_host) {
  if (reply.type != REDIS_REPLY_ERROR) return std::nullopt;
  std::string_view text = Text(reply);
  RedisRedirect redirect;
  if (text.starts_with("MOVED ")) {
    text.remove_prefix(6);
  } else if (text.starts_with("ASK ")) {
    redirect.ask = true;
    text.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const size_t space = text.find(' ');
  if (space == std::string_view::npos ||
      !ParseInt(text.substr(0, space), &redirect.slot) || redirect.slot < 0 ||
      redirect.slot >= kRedisSlots) {
    return std::nullopt;
  }
  StatusOr<RedisAddress> target = SplitRedisAddress(text.substr(space + 1));
  if (!target.ok()) return std::nullopt;
  redirect.target = std::move(target).value();
  // No endpoint to give ("?": cluster-preferred-endpoint-type hostname and
  // no hostname announced; empty: unknown-endpoint): the target is on the
  // address the client reached this node at, as in CLUSTER SLOTS.
  if (redirect.target.host.empty() || redirect.target.host == "?") {
    redirect.target.host = asked_host;
  }
  return redirect;
}

Status ErrorReplyStatus(const redisReply& reply, const std::string& node) {
  const std::string_view text = Text(reply);
  std::string message = "redis " + node + ": " + std::string(text);
  for (std::string_view transient :
       {"CLUSTERDOWN", "TRYAGAIN", "LOADING", "MASTERDOWN"}) {
    if (text.starts_with(transient)) return Status::Unavailable(std::move(message));
  }
  return Status::IOError(std::move(message));
}

}  // namespace prefixkv
