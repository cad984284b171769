// The binaries installed together (`prefixkv`, `prefixkv-bench`) find each
// other in their own directory, as the running binary's /proc/self/exe says:
// `prefixkv bench` runs prefixkv-bench, `prefixkv-bench server` runs
// `prefixkv serve`, whether from the build tree or an install prefix.
#pragma once

#include <string>
#include <vector>

namespace prefixkv::cli {

// "<directory of /proc/self/exe>/<name>"; empty when /proc/self/exe cannot be
// read.
std::string SiblingBinaryPath(const std::string& name);

// Replaces this process with the sibling binary `name` run with `args` (its
// argv[0] is `name`); returns only on failure, with kExitProblem after a
// clear error ("<who>: <name> not found next to <this binary> ..."; JSON with
// --json in `args`).
int ExecSibling(const std::string& who, const std::string& name,
                const std::vector<std::string>& args);

}  // namespace prefixkv::cli
