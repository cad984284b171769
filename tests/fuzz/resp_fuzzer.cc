// libFuzzer target: the RESP parser and command dispatch. Any byte stream, cut
// into reads at arbitrary points, must parse to commands or one protocol
// error, never crash; every command must produce exactly one well-formed RESP
// reply; and a parser that failed must stay failed.
#include <cstdlib>
#include <memory>
#include <string_view>

#include "commands.h"
#include "prefixkv/engine.h"
#include "resp_parser.h"

namespace {

using namespace prefixkv;
using namespace prefixkv::server;

// Consumes one RESP2 reply from the front of `s`; false when malformed.
bool ConsumeReply(std::string_view* s, int depth = 0) {
  if (s->empty() || depth > 8) return false;
  size_t eol = s->find("\r\n");
  if (eol == std::string_view::npos) return false;
  char type = (*s)[0];
  std::string_view line = s->substr(1, eol - 1);
  s->remove_prefix(eol + 2);
  if (type == '+' || type == '-') return line.find('\r') == std::string_view::npos;
  int64_t n = 0;
  if (!ParseRespLength(line, &n)) return false;
  if (type == ':') return true;
  if (type == '$') {
    if (n == -1) return true;
    if (n < 0 || s->size() < static_cast<size_t>(n) + 2) return false;
    if (s->substr(static_cast<size_t>(n), 2) != "\r\n") return false;
    s->remove_prefix(static_cast<size_t>(n) + 2);
    return true;
  }
  if (type == '*') {
    for (int64_t i = 0; i < n; ++i) {
      if (!ConsumeReply(s, depth + 1)) return false;
    }
    return n >= -1;
  }
  return false;
}

// A RAM-only engine (no SSD tier: fast, nothing on disk) with a small hot
// budget, a cap of four models so PKV.REGISTER reaches it, and an admin
// password so AUTH admin and the admin commands are reachable too.
struct Harness {
  std::unique_ptr<Engine> engine =
      Engine::Open({.hot_capacity_bytes = 1 << 20, .log = [](std::string_view) {}})
          .value();
  Dispatcher dispatcher{
      engine.get(),
      DispatcherConfig{.requirepass = "pw", .admin_pass = "admin", .max_models = 4}};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* h = new Harness();
  if (size < 2) return 0;
  // Byte 0 picks the read size, so splits land everywhere; byte 1 whether the
  // client starts authenticated; the rest is the stream.
  size_t step = 1 + data[0] % 64;
  ClientState client = h->dispatcher.NewClient();
  client.authenticated = (data[1] & 1) != 0;
  std::string_view input(reinterpret_cast<const char*>(data) + 2, size - 2);
  RespParser parser(RespLimits{1 << 20, 1024, 4096});
  RespArgs args;
  bool failed = false;
  for (size_t pos = 0; pos < input.size(); pos += step) {
    std::string_view piece = input.substr(pos, step);
    while (true) {
      RespParser::Result r = parser.Parse(&piece, &args);
      if (r == RespParser::Result::kNeedMore) {
        if (!piece.empty()) std::abort();  // kNeedMore means all consumed
        break;
      }
      if (r == RespParser::Result::kError) {
        if (parser.error().rfind("Protocol error: ", 0) != 0) std::abort();
        failed = true;
        break;
      }
      if (failed || args.empty()) std::abort();  // no command after an error
      ReplyBuffer reply;
      h->dispatcher.Execute(args, &client, &reply);
      std::string text = reply.ToString();
      std::string_view rest = text;
      if (!ConsumeReply(&rest) || !rest.empty()) std::abort();  // exactly one reply
    }
    if (failed) break;
  }
  if (failed) {
    std::string_view more = "*1\r\n$4\r\nPING\r\n";
    if (parser.Parse(&more, &args) != RespParser::Result::kError) std::abort();
  }
  return 0;
}
