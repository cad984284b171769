// ReadProcessStats: what the Prometheus client libraries' process collector
// exports, from the same sources (client_golang's procfs): /proc/self/stat for
// CPU time, memory and start time, /proc/stat for the boot time the start time
// counts from, /proc/self/fd for open descriptors, RLIMIT_NOFILE's soft limit.
#include "process_stats.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>
#include <vector>

namespace prefixkv::server {
namespace {

bool ParseU64(std::string_view s, uint64_t* v) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

std::vector<std::string_view> Words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n')) ++i;
    const size_t start = i;
    while (i < s.size() && s[i] != ' ' && s[i] != '\n') ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

// "btime N" of /proc/stat.
bool BootTime(std::string_view proc_stat, uint64_t* btime) {
  size_t at = 0;
  while (at < proc_stat.size()) {
    size_t end = proc_stat.find('\n', at);
    if (end == std::string_view::npos) end = proc_stat.size();
    const std::string_view line = proc_stat.substr(at, end - at);
    if (line.starts_with("btime ")) return ParseU64(line.substr(6), btime);
    at = end + 1;
  }
  return false;
}

StatusOr<std::string> ReadFile(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(std::string("cannot read ") + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

StatusOr<uint64_t> CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return Status::IOError("cannot read /proc/self/fd");
  uint64_t n = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

StatusOr<ProcessStats> ParseProcessStat(std::string_view stat, std::string_view proc_stat,
                                        uint64_t ticks_per_second, uint64_t page_bytes) {
  // The command name is in parentheses and may hold anything, ')' included:
  // the fields start after the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string_view::npos) {
    return Status::Corruption("process stat: no ')' after the command name");
  }
  // Fields from 3 (state) on; w[i] is field i + 3 of proc(5).
  const std::vector<std::string_view> w = Words(stat.substr(close + 1));
  uint64_t utime = 0, stime = 0, starttime = 0, vsize = 0, rss = 0, btime = 0;
  if (w.size() < 22 || !ParseU64(w[11], &utime) || !ParseU64(w[12], &stime) ||
      !ParseU64(w[19], &starttime) || !ParseU64(w[20], &vsize) ||
      !ParseU64(w[21], &rss)) {
    return Status::Corruption("process stat: malformed fields after the command name");
  }
  if (!BootTime(proc_stat, &btime)) {
    return Status::Corruption("/proc/stat: no btime line");
  }
  if (ticks_per_second == 0)
    return Status::InvalidArgument("zero clock ticks per second");
  const double ticks = static_cast<double>(ticks_per_second);
  ProcessStats s;
  s.cpu_seconds = static_cast<double>(utime + stime) / ticks;
  s.virtual_memory_bytes = vsize;
  s.resident_memory_bytes = rss * page_bytes;
  s.start_time_seconds =
      static_cast<double>(btime) + static_cast<double>(starttime) / ticks;
  return s;
}

StatusOr<ProcessStats> ReadProcessStats() {
  PKV_ASSIGN_OR_RETURN(std::string stat, ReadFile("/proc/self/stat"));
  PKV_ASSIGN_OR_RETURN(std::string proc_stat, ReadFile("/proc/stat"));
  const long ticks = sysconf(_SC_CLK_TCK);
  const long page = sysconf(_SC_PAGESIZE);
  PKV_ASSIGN_OR_RETURN(
      ProcessStats s,
      ParseProcessStat(stat, proc_stat, ticks > 0 ? ticks : 100, page > 0 ? page : 4096));
  PKV_ASSIGN_OR_RETURN(s.open_fds, CountOpenFds());
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return Status::IOError("getrlimit(RLIMIT_NOFILE) failed");
  }
  s.max_fds = static_cast<uint64_t>(limit.rlim_cur);
  return s;
}

}  // namespace prefixkv::server
