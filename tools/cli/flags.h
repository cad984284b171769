// A small, strict flag parser for subcommands: `--name value`, `--name=value`
// and boolean `--name`. Unknown flags and missing values are usage errors.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace prefixkv::cli {

struct FlagSpec {
  std::string name;          // without the leading dashes
  std::string help;          // one line for --help
  bool is_bool = false;      // takes no value
  std::string default_text;  // shown in --help; empty: no default
};

class Flags {
 public:
  Flags(std::string usage, std::vector<FlagSpec> specs)
      : usage_(std::move(usage)), specs_(std::move(specs)) {}

  // Parses args. Returns false and fills `error` on a usage error. `--help`
  // sets help_requested(). Positional arguments are collected in order.
  bool Parse(const std::vector<std::string>& args, std::string* error);
  bool help_requested() const { return help_; }
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
  std::vector<std::string> positional_;
  bool help_ = false;
};

// Parses "123", "4K", "16M", "2G", "1T" (powers of 1024). nullopt on error.
std::optional<uint64_t> ParseSize(const std::string& text);

// Prints `error` and the usage line to stderr; returns 2 (the usage exit code).
int UsageError(const Flags& flags, const std::string& error);

}  // namespace prefixkv::cli
