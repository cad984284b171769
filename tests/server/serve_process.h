// Runs the real `prefixkv serve` binary (PREFIXKV_CLI) as a child process on a
// free loopback port, for tests that talk to it like any other Redis server.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

extern char** environ;

namespace prefixkv::testing {

// Runs `command` through the shell (a client such as curl); returns its stdout.
inline std::string ShellOutput(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// Starts `argv` (argv[0] a path) with its stdout into a pipe (and stderr
// appended to `stderr_path` when not empty); the child's pid (-1 when it
// could not start) and the pipe's read end (-1 when none).
struct SpawnedChild {
  pid_t pid = -1;
  int stdout_fd = -1;
};
inline SpawnedChild SpawnWithStdoutPipe(std::vector<std::string> argv,
                                        const std::string& stderr_path = "") {
  SpawnedChild child;
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  int fds[2];
  if (pipe(fds) != 0) return child;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  if (!stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
  if (posix_spawn(&child.pid, cargv[0], &actions, nullptr, cargv.data(), environ) != 0)
    child.pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  child.stdout_fd = fds[0];
  return child;
}

// Not thread-safe. The destructor kills the child if it still runs.
class ServeProcess {
 public:
  // Starts `prefixkv serve --data-dir DIR --port 0 EXTRA...` and waits for the
  // "listening on ...:PORT" line. port() is 0 when it did not start. A
  // non-empty `stderr_path` receives the server's log (appended). A positive
  // `open_file_limit` starts it under `ulimit -n` of that many (soft and hard).
  explicit ServeProcess(const std::string& data_dir,
                        const std::vector<std::string>& extra = {},
                        const std::string& stderr_path = "", int open_file_limit = 0) {
    std::vector<std::string> argv = {PREFIXKV_CLI, "serve",  "--data-dir",
                                     data_dir,     "--port", "0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    if (open_file_limit > 0) {
      argv.insert(argv.begin(), {"/bin/sh", "-c",
                                 "ulimit -n " + std::to_string(open_file_limit) +
                                     " && exec \"$0\" \"$@\""});
    }
    const SpawnedChild child = SpawnWithStdoutPipe(std::move(argv), stderr_path);
    pid_ = child.pid;
    if (child.stdout_fd < 0) return;
    out_ = fdopen(child.stdout_fd, "r");
    char line[256];
    if (pid_ > 0 && out_ != nullptr && fgets(line, sizeof(line), out_) != nullptr) {
      std::string l(line);
      size_t colon = l.rfind(':');
      if (l.rfind("listening on ", 0) == 0 && colon != std::string::npos) {
        port_ = static_cast<uint16_t>(std::atoi(l.c_str() + colon + 1));
      }
    }
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ != nullptr) fclose(out_);
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  uint16_t port() const { return port_; }

  // The next line the server prints on stdout ("" at the end of its output),
  // e.g. "metrics on http://ADDR:PORT/metrics" after the listening line.
  std::string NextLine() {
    char line[256];
    if (out_ == nullptr || fgets(line, sizeof(line), out_) == nullptr) return "";
    return line;
  }
  pid_t pid() const { return pid_; }

  // Sends `sig` and waits for the exit; returns the exit status (or -1).
  int StopWith(int sig) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  uint16_t port_ = 0;
};

}  // namespace prefixkv::testing
