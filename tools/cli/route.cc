// `prefixkv route --nodes host:port,... --model SPEC`: the prefix-aware
// router as a RESP service (tools/route/route_server.h; docs/router.md),
// until SIGINT or SIGTERM.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>

#include "tools/cli/command.h"
#include "tools/cli/flags.h"
#include "tools/cli/replay_routed.h"
#include "tools/cli/stop_signals.h"
#include "tools/route/route_server.h"

namespace prefixkv::cli {
namespace {

Flags RouteFlags() {
  return Flags(
      "prefixkv route --nodes HOST:PORT,... --model SPEC [--model SPEC ...] [flags]\n"
      "\n"
      "Answers ROUTE <model> <token> [token ...] over RESP with the node to send the\n"
      "request to: [\"host:port\", node index, RAM prefix blocks, RAM-or-SSD prefix\n"
      "blocks]. The router learns what each node holds only from its KV event stream\n"
      "(XREAD ... STREAMS prefixkv:events), picks the node holding the longest prefix\n"
      "in RAM, then on SSD, among the nodes under the load bound, else the least\n"
      "loaded; a node whose stream cannot be read (down) gets none, and with no\n"
      "stream readable ROUTE answers an error. A request weighs its token count\n"
      "until ROUTE.DONE <node index> <tokens>.\n"
      "ROUTE.STATS shows the index and each node's feed. docs/router.md.",
      {{"nodes",
        "the prefixkv serve nodes, comma-separated host:port (at most 64, each once)",
        false, ""},
       {"model",
        "a model ROUTE knows, as PKV.REGISTER registers it: "
        "NAME:BLOCK_TOKENS:DTYPE:LAYER_TYPES[:SALT] with LAYER_TYPES comma-separated "
        "(e.g. llama:256:float16:KVCache,KVCache), then PKV.REGISTER's other options "
        "as words ('llama:256:float16:KVCache,KVCache TOKENIZER t9 SHAPES "
        "8x128,8x128'); repeat for more",
        false, ""},
       {"port", "TCP port (0: a free one, printed)", false, "6390"},
       {"bind", "address to listen on (IPv4)", false, "127.0.0.1"},
       {"load-bound",
        "no node takes a request by prefix above this times the mean in-flight load "
        "(0: no bound)",
        false, "1.25"},
       {"ssd-block-weight",
        "a block on SSD counts this much next to one in RAM (0: the longest RAM prefix "
        "wins, SSD breaks ties)",
        false, "0"},
       {"max-blocks", "most distinct blocks the index holds (about 64 bytes each)", false,
        "16M"},
       {"xread-block-ms", "XREAD BLOCK of the node feeds", false, "500"}});
}

// NAME:BLOCK_TOKENS:DTYPE:LAYER_TYPES[:SALT], then PKV.REGISTER's later
// options as words: KEYWORD VALUE pairs (REVISION r TOKENIZER t SHAPES s
// QUANT q TP r/s PP r/s, and SALT) and PARTIAL_TAIL (a store option: no part
// of the root). Without them, a model registered with any of them hashed to
// another root than the nodes' and was routed by load alone.
std::string ParseModel(const std::string& text, NamespaceSpec* spec) {
  std::vector<std::string> words;
  std::stringstream by_space(text);
  for (std::string w; by_space >> w;) words.push_back(w);
  const std::string head = words.empty() ? "" : words[0];
  std::vector<std::string> parts;
  std::stringstream in(head);
  for (std::string p; std::getline(in, p, ':');) parts.push_back(p);
  if (parts.size() < 4 || parts.size() > 5)
    return "--model '" + text +
           "' is not NAME:BLOCK_TOKENS:DTYPE:LAYER_TYPES[:SALT] [KEYWORD VALUE ...]";
  spec->model = parts[0];
  std::optional<uint64_t> block = ParseSize(parts[1]);
  if (!block || *block == 0 || *block > (1u << 22))
    return "--model '" + text + "': block tokens must be 1..4194304";
  spec->block_tokens = static_cast<uint32_t>(*block);
  StatusOr<DType> dtype = ParseDType(parts[2]);
  if (!dtype.ok()) return "--model '" + text + "': unknown dtype '" + parts[2] + "'";
  spec->dtype = *dtype;
  std::stringstream layers(parts[3]);
  for (std::string l; std::getline(layers, l, ',');) spec->layer_types.push_back(l);
  if (parts.size() == 5) spec->salt = parts[4];
  for (size_t i = 1; i < words.size(); ++i) {
    std::string word = words[i];
    for (char& c : word)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (word == "partial_tail") continue;
    const char* field = RegisterKeywordField(word);
    if (field == nullptr)
      return "--model '" + text + "': '" + words[i] +
             "' is not an option of PKV.REGISTER (SALT, REVISION, TOKENIZER, SHAPES, "
             "QUANT, TP, PP, PARTIAL_TAIL)";
    if (i + 1 >= words.size())
      return "--model '" + text + "': " + words[i] + " has no value";
    if (Status s = SetSpecField(spec, field, words[++i]); !s.ok())
      return "--model '" + text + "': " + s.message();
  }
  if (StatusOr<std::string> f = spec->Fingerprint(); !f.ok())
    return "--model '" + text + "': " + f.status().message();
  return "";
}

std::string Configure(const Flags& flags, route::RouteServerOptions* o) {
  std::stringstream nodes(flags.GetString("nodes"));
  std::vector<std::pair<std::string, int>> seen;
  for (std::string n; std::getline(nodes, n, ',');) {
    std::string host;
    int port = 0;
    if (Status s = route::ParseHostPort(n, &host, &port); !s.ok())
      return "--nodes: " + s.message();
    // A node given twice was routed to as two: two feeds of one stream, its
    // in-flight load split over two indices, so it took twice its share.
    const auto again = std::find(seen.begin(), seen.end(), std::pair(host, port));
    if (again != seen.end())
      return "--nodes: '" + n + "' is node " + std::to_string(again - seen.begin()) +
             " again";
    seen.emplace_back(host, port);
    o->nodes.push_back(n);
  }
  if (o->nodes.empty() || o->nodes.size() > kMaxRouterNodes)
    return "--nodes: give 1..64 nodes as host:port,...";
  for (const std::string& m : flags.GetAll("model")) {
    NamespaceSpec spec;
    if (std::string e = ParseModel(m, &spec); !e.empty()) return e;
    // ROUTE names a model by its name alone; RouteServer::Start refused a
    // second one only after the flags passed (exit 1 for a bad flag).
    for (const NamespaceSpec& earlier : o->models) {
      if (earlier.model == spec.model) return "--model '" + spec.model + "' given twice";
    }
    o->models.push_back(spec);
  }
  if (o->models.empty()) return "give at least one --model";
  std::string error;
  o->router.load_bound = GetReal(flags, "load-bound", 1.25, 0, 1e6, &error);
  if (error.empty())
    o->router.ssd_block_weight = GetReal(flags, "ssd-block-weight", 0, 0, 1, &error);
  std::optional<uint64_t> port =
      flags.Has("port") ? flags.GetCount("port", &error) : std::optional<uint64_t>(6390);
  std::optional<uint64_t> max_blocks = flags.GetSize("max-blocks", &error);
  std::optional<uint64_t> block_ms = flags.GetCount("xread-block-ms", &error);
  if (!error.empty()) return error;
  if (o->router.load_bound != 0 && o->router.load_bound < 1)
    return NotInRange(flags, "load-bound", ">= 1 (0: no bound)");
  if (!port || *port > 65535) return NotInRange(flags, "port", "0..65535");
  o->port = static_cast<uint16_t>(*port);
  if (max_blocks) {
    if (*max_blocks == 0) return NotInRange(flags, "max-blocks", "> 0");
    o->router.max_blocks = *max_blocks;
  }
  if (block_ms) {
    if (*block_ms < 1 || *block_ms > 60000)
      return NotInRange(flags, "xread-block-ms", "1..60000");
    o->feed.block_ms = static_cast<uint32_t>(*block_ms);
  }
  if (std::string e = BindAddressError(flags, /*ipv6=*/false); !e.empty()) return e;
  o->bind_address = flags.GetString("bind", "127.0.0.1");
  return "";
}

int RunRoute(const std::vector<std::string>& args) {
  Flags flags = RouteFlags();
  std::string error;
  if (!flags.Parse(args, &error)) return UsageError(flags, error);
  if (flags.help_requested()) {
    std::printf("%s", flags.HelpText().c_str());
    return 0;
  }
  route::RouteServerOptions options;
  if (std::string e = Configure(flags, &options); !e.empty()) return UsageError(flags, e);
  // As serve: a closed terminal or a log reader that went away must not end
  // the router (SIGHUP killed it at once, SIGPIPE at its "stopping" line).
  IgnoreBrokenPipes();
  IgnoreHangups();
  sigset_t stop_signals = BlockStopSignals();
  StatusOr<std::unique_ptr<route::RouteServer>> server =
      route::RouteServer::Start(options);
  if (!server.ok()) return Failure(flags, "route", server.status().ToString());
  std::printf("routing on %s:%u over %zu nodes\n", options.bind_address.c_str(),
              (*server)->port(), options.nodes.size());
  std::fflush(stdout);
  const int sig = WaitForStopSignal(stop_signals);
  std::fprintf(stderr, "prefixkv route: %s, stopping\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM");
  (*server)->Stop();
  return kExitOk;
}

}  // namespace

PKV_REGISTER_COMMAND("route",
                     "a prefix-aware router over prefixkv nodes, fed by their KV event "
                     "streams, answering ROUTE over RESP",
                     RunRoute);

}  // namespace prefixkv::cli
