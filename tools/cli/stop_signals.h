// SIGINT / SIGTERM for the commands that run until stopped (serve, route).
#pragma once

#include <pthread.h>
#include <signal.h>

namespace prefixkv::cli {

// Blocks SIGINT and SIGTERM in this thread and every thread it starts later,
// so that WaitForStopSignal() is the only place they are delivered.
inline sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

inline int WaitForStopSignal(const sigset_t& set) {
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}

}  // namespace prefixkv::cli
