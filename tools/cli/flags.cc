// The strict flag parser every subcommand shares (flags.h): `--name value`,
// `--name=value` and boolean `--name`, sizes with K/M/G/T (binary) suffixes, and
// the usage error. Strict on purpose: an unknown flag, a missing value or a size
// that overflows is an error with the usage text, never ignored, so a typo in a
// capacity cannot silently run a cache of the default size.
#include "tools/cli/flags.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "tools/cli/json.h"

namespace prefixkv::cli {

const FlagSpec* Flags::Find(const std::string& name) const {
  for (const FlagSpec& s : specs_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const char kExitCodeHelp[] =
    "exit codes:\n"
    "  0  success (audit: everything agrees)\n"
    "  1  a problem found or an operation failed on valid input (audit findings,\n"
    "     a failed check, I/O or corruption errors, a port or data directory in use,\n"
    "     output that could not be written)\n"
    "  2  usage: unknown command or flag, bad or missing value, stray argument, an\n"
    "     input path given that does not exist or cannot be read\n";

const char kJsonFailureHelp[] =
    "a failure prints {\"ok\":false,\"error\":\"...\"} on stdout\n";

bool Flags::Parse(const std::vector<std::string>& args, std::string* error) {
  json_ = Find("json") != nullptr && HasJsonArg(args);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || a == "--") {
      if (positional_.size() == max_positional_) {
        *error = "unexpected argument '" + a + "'";
        return false;
      }
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const FlagSpec* spec = Find(name);
    if (spec == nullptr) {
      *error = "unknown flag --" + name;
      return false;
    }
    if (spec->is_bool) {
      if (value) {
        *error = "--" + name + " takes no value";
        return false;
      }
      values_[name] = "true";
      continue;
    }
    if (!value) {
      if (i + 1 >= args.size()) {
        *error = "--" + name + " needs a value";
        return false;
      }
      value = args[++i];
    }
    values_[name] = *value;
    all_values_[name].push_back(*value);
  }
  return true;
}

std::string Flags::HelpText() const {
  std::string out = "usage: " + usage_ + "\n";
  if (!specs_.empty()) out += "\noptions:\n";
  for (const FlagSpec& s : specs_) {
    std::string left = "  --" + s.name + (s.is_bool ? "" : " VALUE");
    if (left.size() < 30) left.resize(30, ' ');
    out += left + " " + s.help;
    if (!s.default_text.empty()) out += " (default: " + s.default_text + ")";
    out += "\n";
  }
  out += "  --help                         show this help\n";
  out += "\n" + std::string(kExitCodeHelp);
  // Only a command that takes --json can print its failure as JSON (repair,
  // serve... cannot: their help must not promise it).
  if (Find("json") != nullptr) out += "with --json " + std::string(kJsonFailureHelp);
  return out;
}

std::string Flags::GetString(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

std::optional<uint64_t> ParseSize(const std::string& text) {
  if (text.empty()) return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc()) return std::nullopt;
  std::string suffix(end, text.data() + text.size());
  int shift = 0;
  if (suffix.empty())
    shift = 0;
  else if (suffix == "K" || suffix == "k" || suffix == "KiB")
    shift = 10;
  else if (suffix == "M" || suffix == "MiB")
    shift = 20;
  else if (suffix == "G" || suffix == "GiB")
    shift = 30;
  else if (suffix == "T" || suffix == "TiB")
    shift = 40;
  else
    return std::nullopt;
  if (shift > 0 && v > (UINT64_MAX >> shift)) return std::nullopt;
  return v << shift;
}

std::optional<uint64_t> Flags::GetSize(const std::string& name,
                                       std::string* error) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  std::optional<uint64_t> v = ParseSize(it->second);
  if (!v)
    *error = "--" + name + ": '" + it->second + "' is not a size (e.g. 4096, 64M, 2G)";
  return v;
}

std::optional<uint64_t> Flags::GetCount(const std::string& name,
                                        std::string* error) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  const std::string& text = it->second;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    *error =
        "--" + name + ": '" + text + "' is not a whole number (digits only, e.g. 6380)";
    return std::nullopt;
  }
  return v;
}

bool HasJsonArg(const std::vector<std::string>& args) {
  return std::find(args.begin(), args.end(), "--json") != args.end();
}

int ReportError(bool json, const std::string& who, const std::string& error,
                int exit_code) {
  if (json) {
    JsonWriter j;
    j.BeginObject().Field("ok", false).Field("error", error).EndObject();
    std::printf("%s\n", j.str().c_str());
    std::fflush(stdout);
  }
  std::fprintf(stderr, "%s: %s\n", who.c_str(), error.c_str());
  return exit_code;
}

int UsageError(const Flags& flags, const std::string& error) {
  ReportError(flags.json_requested(), "prefixkv", error, kExitUsage);
  std::fprintf(stderr, "%s", flags.HelpText().c_str());
  return kExitUsage;
}

int Failure(const Flags& flags, const std::string& command, const std::string& error) {
  return ReportError(flags.json_requested(), "prefixkv " + command, error, kExitProblem);
}

int OpenError(const Flags& flags, const std::string& command, const Status& status) {
  if (status.IsNotFound()) return UsageError(flags, status.ToString());
  return Failure(flags, command, status.ToString());
}

std::string NotInRange(const Flags& flags, const std::string& name,
                       const std::string& range) {
  return "--" + name + " must be " + range + ", not '" + flags.GetString(name) + "'";
}

std::string BindAddressError(const Flags& flags, bool ipv6) {
  const std::string text = flags.GetString("bind", "127.0.0.1");
  unsigned char addr[sizeof(in6_addr)];
  if (::inet_pton(AF_INET, text.c_str(), addr) == 1) return "";
  const std::string unscoped = text.substr(0, text.find('%'));
  if (ipv6 && ::inet_pton(AF_INET6, unscoped.c_str(), addr) == 1) return "";
  return NotInRange(flags, "bind", ipv6 ? "an IPv4 or IPv6 address" : "an IPv4 address");
}

std::string EmptyOutputFile(const Flags& flags, const std::string& name) {
  if (!flags.Has(name) || !flags.GetString(name).empty()) return "";
  return "--" + name + " must name a file (an empty one is written nowhere)";
}

int FinishOutput(const std::string& who, int exit_code) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int flush_error = errno;
  if (flushed && !std::ferror(stdout)) return exit_code;
  std::fprintf(stderr, "%s: the output could not be written to stdout%s\n", who.c_str(),
               flushed || flush_error == 0
                   ? ""
                   : (std::string(" (") + std::strerror(flush_error) + ")").c_str());
  return exit_code == kExitOk ? kExitProblem : exit_code;
}

double GetReal(const Flags& flags, const std::string& name, double def, double lo,
               double hi, std::string* error) {
  if (!flags.Has(name)) return def;
  const std::string text = flags.GetString(name);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < lo ||
      v > hi) {
    char range[64];
    std::snprintf(range, sizeof range, "%g..%g", lo, hi);
    *error = "--" + name + " must be a number in " + range + ", not '" + text + "'";
    return def;
  }
  return v;
}

}  // namespace prefixkv::cli
