// Finding and running a sibling binary (sibling_binary.h): the directory comes
// from /proc/self/exe, never from PATH, so `prefixkv bench` in a build tree
// runs that tree's prefixkv-bench and an installed one the installed one.
#include "tools/cli/sibling_binary.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "tools/cli/flags.h"

namespace prefixkv::cli {

std::string SiblingBinaryPath(const std::string& name) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return (self.parent_path() / name).string();
}

int ExecSibling(const std::string& who, const std::string& name,
                const std::vector<std::string>& args) {
  const bool json = HasJsonArg(args);
  const std::string path = SiblingBinaryPath(name);
  if (path.empty()) {
    return ReportError(json, who, "cannot find " + name + ": /proc/self/exe unreadable",
                       kExitProblem);
  }
  if (::access(path.c_str(), X_OK) != 0) {
    return ReportError(json, who,
                       name + " not found next to this binary (" + path + ": " +
                           std::strerror(errno) + "); install it with prefixkv (" +
                           "cmake --install) or build its target",
                       kExitProblem);
  }
  std::vector<char*> argv;
  std::string argv0 = name;
  argv.push_back(argv0.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execv(path.c_str(), argv.data());
  return ReportError(json, who, "cannot run " + path + ": " + std::strerror(errno),
                     kExitProblem);
}

}  // namespace prefixkv::cli
