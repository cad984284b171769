// Transactions: MULTI, EXEC, DISCARD, and WATCH / UNWATCH (WATCH refused).
//
// MULTI starts queueing: every later command except these and QUIT is checked
// (name, arity, AUTH, admin) and answered +QUEUED, or refused, which marks the
// transaction so that EXEC answers -EXECABORT. EXEC runs the queue in order
// under the dispatcher's exclusive lock (Dispatcher::ExecQueued), so no other
// client's command runs in between; a command failing inside it does not stop
// the others (as in Redis: no rollback).
#include <algorithm>
#include <cstring>
#include <string>

#include "command_stats.h"
#include "commands.h"

namespace prefixkv::server {

namespace {

// A queued command's arguments, safe to keep until EXEC: the small ones
// copied together into one buffer (one allocation per command: detached one
// by one, an empty argument cost about 220 bytes, 37 times its 6 bytes on the
// wire), the large ones shared as received.
RespArgs KeepArgs(const RespArgs& args) {
  size_t small = 0;
  for (const SharedBytes& arg : args) {
    if (arg.size() <= kSharedArgBytes) small += arg.size();
  }
  uint8_t* data = nullptr;
  const SharedBytes buffer =
      small > 0 ? SharedBytes::Allocate(small, &data) : SharedBytes();
  RespArgs kept;
  kept.reserve(args.size());
  size_t used = 0;
  for (const SharedBytes& arg : args) {
    if (arg.size() > kSharedArgBytes) {
      kept.push_back(arg);
      continue;
    }
    if (!arg.empty()) std::memcpy(data + used, arg.data(), arg.size());
    kept.push_back(buffer.Slice(used, arg.size()));
    used += arg.size();
  }
  return kept;
}

}  // namespace

void Dispatcher::Queue(const RespArgs& args, ClientState* client,
                       ReplyBuffer* out) const {
  // What the queue holds for it: the argument bytes and each argument's
  // place in the list (KeepArgs), so that neither the limit nor
  // client_buffer_bytes overlooks a command of many small arguments.
  size_t bytes = args.size() * sizeof(SharedBytes);
  for (const SharedBytes& arg : args) bytes += arg.size();
  if (bytes >
      config_.max_multi_bytes - std::min(config_.max_multi_bytes, client->multi_bytes)) {
    client->multi_dirty = true;
    return out->Error("ERR transaction too large: its commands exceed " +
                      std::to_string(config_.max_multi_bytes) + " bytes");
  }
  client->multi_queue.push_back(KeepArgs(args));
  client->multi_bytes += bytes;
  out->Simple("QUEUED");
}

void Dispatcher::ExecQueued(ClientState* client, ReplyBuffer* out) const {
  std::vector<RespArgs> queue = std::move(client->multi_queue);
  const bool dirty = client->multi_dirty;
  client->in_multi = client->multi_dirty = false;
  client->multi_queue.clear();
  client->multi_bytes = 0;
  if (dirty) {
    return out->Error("EXECABORT Transaction discarded because of previous errors.");
  }
  out->ArrayHeader(queue.size());
  // Each was checked when queued, and is checked again before it runs: an
  // AUTH queued before it may have made an admin the default user since (as
  // Redis checks ACLs again at EXEC). It then answers the refusal in place.
  client->in_exec = true;
  for (const RespArgs& args : queue) {
    const CommandSpec& spec = *Find(args[0].view());
    const uint64_t errors_before = out->errors();
    if (std::string refusal = Refusal(spec, args, *client); !refusal.empty()) {
      if (config_.command_stats != nullptr) {
        config_.command_stats->Rejected(static_cast<size_t>(&spec - Table().data()));
      }
      out->Error(refusal);
    } else {
      Run(spec, args, client, out);
    }
    client->exec_command_errors += out->errors() - errors_before;
  }
  client->in_exec = false;
}

void CmdMulti(CommandContext& ctx) {
  if (ctx.client->in_multi) return ctx.out->Error("ERR MULTI calls can not be nested");
  ctx.client->in_multi = true;
  ctx.out->Simple("OK");
}

void CmdExec(CommandContext& ctx) {
  if (!ctx.client->in_multi) return ctx.out->Error("ERR EXEC without MULTI");
  ctx.dispatcher.ExecQueued(ctx.client, ctx.out);
}

void CmdDiscard(CommandContext& ctx) {
  if (!ctx.client->in_multi) return ctx.out->Error("ERR DISCARD without MULTI");
  ctx.client->in_multi = ctx.client->multi_dirty = false;
  ctx.client->multi_queue.clear();
  ctx.client->multi_bytes = 0;
  ctx.out->Simple("OK");
}

// Optimistic locking would need a modification stamp per key, which the
// engine does not keep: WATCH is refused rather than accepted and ignored
// (an ignored WATCH would let a check-and-set transaction overwrite a value
// changed meanwhile).
void CmdWatch(CommandContext& ctx) {
  if (ctx.client->in_multi) {
    return ctx.out->Error("ERR WATCH inside MULTI is not allowed");
  }
  ctx.out->Error(
      "ERR WATCH is not supported by prefixkv: MULTI/EXEC transactions run "
      "isolated, but without optimistic locking");
}

// Nothing is ever watched, so there is nothing to forget.
void CmdUnwatch(CommandContext& ctx) { ctx.out->Simple("OK"); }

}  // namespace prefixkv::server
