// Transactions: MULTI, EXEC, DISCARD, and WATCH / UNWATCH (WATCH refused).
//
// MULTI starts queueing: every later command except these and QUIT is checked
// (name, arity, AUTH, admin) and answered +QUEUED, or refused, which marks the
// transaction so that EXEC answers -EXECABORT. EXEC runs the queue in order
// under the dispatcher's exclusive lock (Dispatcher::ExecQueued), so no other
// client's command runs in between; a command failing inside it does not stop
// the others (as in Redis: no rollback).
#include "commands.h"

namespace prefixkv::server {

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
