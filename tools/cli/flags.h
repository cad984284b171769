// A small, strict flag parser for subcommands: `--name value`, `--name=value`
// and boolean `--name`. Unknown flags, missing values and positional
// arguments beyond the command's count are usage errors. Also the exit codes
// every command shares and the error reporters that keep them (and --json's
// {"ok":false,"error":"..."}) the same everywhere.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "prefixkv/status.h"

namespace prefixkv::cli {

// The exit codes of every command (`prefixkv --help` prints this table).
//   0  success (audit: clean)
//   1  a problem found or an operation failed on valid input: audit findings,
//      a demo parity failure, an I/O or corruption error, a port in use, a
//      data directory another process holds
//   2  usage: an unknown command or flag, a malformed or missing value, a
//      stray argument, contradictory flags, an input path the user named that
//      does not exist or cannot be read (a data directory, a trace)
inline constexpr int kExitOk = 0;
inline constexpr int kExitProblem = 1;
inline constexpr int kExitUsage = 2;
extern const char kExitCodeHelp[];  // the table above, for --help
// What --json does to a failure, for the help of a command that takes --json
// ("with --json " first) or of a list of commands some of which take it.
extern const char kJsonFailureHelp[];

struct FlagSpec {
  std::string name;          // without the leading dashes
  std::string help;          // one line for --help
  bool is_bool = false;      // takes no value
  std::string default_text;  // shown in --help; empty: no default
};

class Flags {
 public:
  // `max_positional`: how many positional arguments the command takes (more
  // are a usage error naming the first extra one).
  Flags(std::string usage, std::vector<FlagSpec> specs, size_t max_positional = 0)
      : usage_(std::move(usage)),
        specs_(std::move(specs)),
        max_positional_(max_positional) {}

  // Parses args. Returns false and fills `error` on a usage error. `--help`
  // sets help_requested(). Positional arguments are collected in order.
  bool Parse(const std::vector<std::string>& args, std::string* error);
  bool help_requested() const { return help_; }
  // The command has a --json flag and the arguments hold it: set by Parse
  // before anything else, so even a usage error is reported as JSON.
  bool json_requested() const { return json_; }
  std::string HelpText() const;

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  bool GetBool(const std::string& name) const { return Has(name); }
  std::string GetString(const std::string& name, const std::string& def = "") const;
  // Parses an unsigned integer with optional K/M/G/T suffix (powers of 1024);
  // sets `error` when malformed.
  std::optional<uint64_t> GetSize(const std::string& name, std::string* error) const;
  // Parses a plain unsigned decimal integer (a port, a count, milliseconds:
  // no suffix, no sign); sets `error` when malformed.
  std::optional<uint64_t> GetCount(const std::string& name, std::string* error) const;
  // Every value a flag was given, in order (a flag given more than once;
  // GetString returns the last).
  std::vector<std::string> GetAll(const std::string& name) const {
    auto it = all_values_.find(name);
    return it == all_values_.end() ? std::vector<std::string>{} : it->second;
  }
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  const FlagSpec* Find(const std::string& name) const;

  std::string usage_;
  std::vector<FlagSpec> specs_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> all_values_;
  size_t max_positional_ = 0;
  std::vector<std::string> positional_;
  bool help_ = false;
  bool json_ = false;
};

// A real-number flag in [lo, hi]; `def` when absent. Sets `error` (naming the
// flag and the range) when malformed or out of range.
double GetReal(const Flags& flags, const std::string& name, double def, double lo,
               double hi, std::string* error);

// "--NAME must be RANGE, not 'VALUE'": the usage error of a flag whose value
// is out of its range (or malformed), naming the value given.
std::string NotInRange(const Flags& flags, const std::string& name,
                       const std::string& range);

// The usage error of a --bind that is no IPv4 address (nor, with `ipv6`, an
// IPv6 one, a %scope allowed), or "": the listen that refused it later
// failed as an operation (exit 1) after the data directory was opened.
std::string BindAddressError(const Flags& flags, bool ipv6);

// The usage error of an output file flag given an empty value (`--svg "$OUT"`
// with OUT unset), or "": the file was written nowhere and nothing said so
// (exit 0).
std::string EmptyOutputFile(const Flags& flags, const std::string& name);

// Parses "123", "4K", "16M", "2G", "1T" (powers of 1024). nullopt on error.
std::optional<uint64_t> ParseSize(const std::string& text);

// Whether `args` hold --json, for errors found before a command's Flags
// parse them (an unknown command or bench suite).
bool HasJsonArg(const std::vector<std::string>& args);

// Prints "prefixkv WHO: error" to stderr and, when `json`, the line
// {"ok":false,"error":"..."} to stdout; returns `exit_code`.
int ReportError(bool json, const std::string& who, const std::string& error,
                int exit_code);

// Prints `error` and the usage text to stderr (and the JSON error line with
// --json); returns kExitUsage.
int UsageError(const Flags& flags, const std::string& error);

// A command that ran on valid input and failed: ReportError as `command`
// ("prefixkv audit: ..."), JSON with --json; returns kExitProblem.
int Failure(const Flags& flags, const std::string& command, const std::string& error);

// An input the user named (a data directory, a trace) that could not be
// opened: NotFound is a usage error, anything else (damage, I/O, a directory
// another process holds) a Failure.
int OpenError(const Flags& flags, const std::string& command, const Status& status);

// What main returns: `exit_code`, unless stdout could not take the output
// (a full disk, a file on a read-only or failing device): then "WHO: the
// output could not be written ..." on stderr and kExitProblem (a failure's
// own code is kept), so a truncated report never exits 0.
int FinishOutput(const std::string& who, int exit_code);

}  // namespace prefixkv::cli
