// RespClient over hiredis's blocking context (resp_client.h).
#include "tools/route/resp_client.h"

#include <hiredis/hiredis.h>

namespace prefixkv::route {
namespace {

timeval Timeval(uint32_t ms) {
  return timeval{static_cast<time_t>(ms / 1000),
                 static_cast<suseconds_t>(ms % 1000 * 1000)};
}

RespValue Convert(const redisReply& r) {
  RespValue v;
  switch (r.type) {
    case REDIS_REPLY_STRING:
      v.type = RespValue::Type::kString;
      break;
    case REDIS_REPLY_STATUS:
      v.type = RespValue::Type::kStatus;
      break;
    case REDIS_REPLY_ERROR:
      v.type = RespValue::Type::kError;
      break;
    case REDIS_REPLY_INTEGER:
      v.type = RespValue::Type::kInteger;
      v.integer = r.integer;
      return v;
    case REDIS_REPLY_ARRAY:
      v.type = RespValue::Type::kArray;
      for (size_t i = 0; i < r.elements; ++i)
        v.elements.push_back(Convert(*r.element[i]));
      return v;
    default:
      v.type = RespValue::Type::kNil;
      return v;
  }
  if (r.str != nullptr) v.str.assign(r.str, r.len);
  return v;
}

}  // namespace

struct RespClient::Impl {
  redisContext* ctx = nullptr;
  ~Impl() {
    if (ctx != nullptr) redisFree(ctx);
  }
};

std::string RespValue::Text() const {
  if (type == Type::kInteger) return std::to_string(integer);
  if (type == Type::kNil) return "(nil)";
  if (type != Type::kArray) return str;
  std::string out;
  for (size_t i = 0; i < elements.size(); ++i) out += (i ? " " : "") + elements[i].Text();
  return out;
}

StatusOr<std::unique_ptr<RespClient>> RespClient::Connect(const std::string& host,
                                                          int port, uint32_t timeout_ms) {
  std::unique_ptr<RespClient> c(new RespClient());
  c->impl_ = std::make_unique<Impl>();
  c->impl_->ctx = redisConnectWithTimeout(host.c_str(), port, Timeval(timeout_ms));
  const std::string where = host + ":" + std::to_string(port);
  if (c->impl_->ctx == nullptr) return Status::IOError("cannot connect to " + where);
  if (c->impl_->ctx->err != 0)
    return Status::IOError("cannot connect to " + where + ": " + c->impl_->ctx->errstr);
  PKV_RETURN_IF_ERROR(c->SetTimeout(timeout_ms));
  return c;
}

RespClient::~RespClient() = default;

Status RespClient::SetTimeout(uint32_t timeout_ms) {
  if (redisSetTimeout(impl_->ctx, Timeval(timeout_ms)) != REDIS_OK)
    return Status::IOError("cannot set the reply timeout");
  return Status::OK();
}

StatusOr<RespValue> RespClient::Command(const std::vector<std::string>& args) {
  if (impl_->ctx->err != 0) return Status::IOError(impl_->ctx->errstr);
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* reply = static_cast<redisReply*>(redisCommandArgv(
      impl_->ctx, static_cast<int>(argv.size()), argv.data(), lens.data()));
  if (reply == nullptr) return Status::IOError(impl_->ctx->errstr);
  RespValue v = Convert(*reply);
  freeReplyObject(reply);
  return v;
}

}  // namespace prefixkv::route
