// CLIENT ID / SETNAME / GETNAME / INFO / LIST / SETINFO / HELP: what client
// libraries send on connect (redis-py's client_name, lib-name) and what
// operators list. The clients are the server's ClientRegistry.
#include <algorithm>
#include <iterator>
#include <string>

#include "commands.h"

namespace prefixkv::server {
namespace {

// One line of CLIENT LIST / INFO, with Redis 7's fields in its order (client
// libraries parse some as integers). Buffer and pub/sub fields prefixkv does
// not track per client (qbuf, argv-mem, obl, omem, tot-mem...) are 0; fd is -1.
std::string ClientLine(const ClientRecord& r, uint64_t now_ms) {
  const auto since = [now_ms](uint64_t ms) {
    return std::to_string(now_ms > ms ? (now_ms - ms) / 1000 : 0);
  };
  const int64_t multi = r.multi.load(std::memory_order_relaxed);
  const CommandSpec* cmd = r.last_command.load(std::memory_order_relaxed);
  return "id=" + std::to_string(r.id) + " addr=" + r.addr + " laddr=" + r.laddr +
         " fd=-1 name=" + r.name() + " age=" + since(r.created_ms) +
         " idle=" + since(r.last_command_ms.load(std::memory_order_relaxed)) +
         " flags=" + (multi >= 0 ? "x" : "N") +
         " db=0 sub=0 psub=0 ssub=0 multi=" + std::to_string(multi) +
         " qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0"
         " tot-mem=0 events=r cmd=" +
         (cmd != nullptr ? cmd->name : "NULL") +
         " user=" + (r.admin.load(std::memory_order_relaxed) ? "admin" : "default") +
         " redir=-1 resp=2\n";
}

// CLIENT LIST [TYPE normal] [ID id ...]
void ClientList(CommandContext& ctx) {
  std::vector<uint64_t> ids;
  for (size_t i = 2; i < ctx.args.size(); ++i) {
    const std::string opt = Lower(ctx.arg(i));
    if (opt == "type" && i + 1 < ctx.args.size()) {
      const std::string type = Lower(ctx.arg(++i));
      if (type == "normal") continue;
      if (type == "master" || type == "replica" || type == "pubsub") {
        return ctx.out->Bulk("");  // prefixkv has no such clients
      }
      return ctx.out->Error("ERR Unknown client type " + Quoted(ctx.arg(i)));
    }
    if (opt != "id" || i + 1 >= ctx.args.size())
      return ctx.out->Error("ERR syntax error");
    for (++i; i < ctx.args.size(); ++i) {
      int64_t id = 0;
      if (!ParseRespLength(ctx.arg(i), &id) || id <= 0) {
        return ctx.out->Error("ERR Invalid client ID");
      }
      ids.push_back(static_cast<uint64_t>(id));
    }
  }
  const uint64_t now_ms = ctx.dispatcher.NowMillis();
  std::string text;
  for (const auto& record : ctx.dispatcher.clients().Snapshot()) {
    if (ids.empty() || std::find(ids.begin(), ids.end(), record->id) != ids.end()) {
      text += ClientLine(*record, now_ms);
    }
  }
  ctx.out->Bulk(text);
}

void ClientHelp(CommandContext& ctx) {
  static const char* const kLines[] = {
      "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
      "GETNAME",
      "    Return the name of the current connection.",
      "ID",
      "    Return the ID of the current connection.",
      "INFO",
      "    Return information about the current client connection.",
      "LIST [TYPE normal] [ID <id> [<id> ...]]",
      "    Return information about client connections.",
      "SETINFO <LIB-NAME|LIB-VER> <value>",
      "    Accepted and not kept.",
      "SETNAME <name>",
      "    Assign the name <name> to the current connection.",
      "HELP",
      "    Print this help."};
  ctx.out->ArrayHeader(std::size(kLines));
  for (const char* line : kLines) ctx.out->Simple(line);
}

}  // namespace

void CmdClient(CommandContext& ctx) {
  const std::string sub = Lower(ctx.arg(1));
  const size_t n = ctx.args.size();
  ClientRecord& self = *ctx.client->record;
  if (sub == "id" && n == 2) {
    ctx.out->Integer(static_cast<int64_t>(self.id));
  } else if (sub == "getname" && n == 2) {
    const std::string name = self.name();
    name.empty() ? ctx.out->Null() : ctx.out->Bulk(name);
  } else if (sub == "setname" && n == 3) {
    if (!ValidClientName(ctx.arg(2))) return ctx.out->Error(kBadClientName);
    self.set_name(std::string(ctx.arg(2)));
    ctx.out->Simple("OK");
  } else if (sub == "setinfo" && n == 4) {
    const std::string attr = Lower(ctx.arg(2));
    if (attr != "lib-name" && attr != "lib-ver") {
      return ctx.out->Error("ERR Unrecognized option " + Quoted(ctx.arg(2)));
    }
    ctx.out->Simple("OK");
  } else if (sub == "info" && n == 2) {
    ctx.out->Bulk(ClientLine(self, ctx.dispatcher.NowMillis()));
  } else if (sub == "list") {
    ClientList(ctx);
  } else if (sub == "help" && n == 2) {
    ClientHelp(ctx);
  } else if (sub == "id" || sub == "getname" || sub == "setname" || sub == "setinfo" ||
             sub == "info" || sub == "help") {
    ctx.out->Error("ERR wrong number of arguments for 'client|" + sub + "' command");
  } else {
    ctx.out->Error("ERR unknown subcommand " + Quoted(ctx.arg(1)) + ". Try CLIENT HELP.");
  }
}

}  // namespace prefixkv::server
