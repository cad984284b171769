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

// A log reader that went away (`serve 2>&1 | tee log`, tee ended by the same
// Ctrl-C) must not end the process at its next stderr line: the default
// SIGPIPE killed `serve` at "shutting down", before the engine's close wrote
// RAM back, losing every value not yet on SSD (and `route` at "stopping").
// Ignored, the write fails (EPIPE) and the shutdown goes on; the servers'
// sockets already send with MSG_NOSIGNAL (hiredis, which route's node feeds
// use, writes with write(): a node's reset connection is then an error too).
inline void IgnoreBrokenPipes() { signal(SIGPIPE, SIG_IGN); }

// A closed terminal or ssh session (SIGHUP) must not end the process without
// its shutdown: the default action killed `serve` at once, every value still
// only in RAM lost (and `route`, every ROUTE failing from then on). As Redis
// does, a hangup is ignored; SIGTERM stops it.
inline void IgnoreHangups() { signal(SIGHUP, SIG_IGN); }

inline int WaitForStopSignal(const sigset_t& set) {
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}

}  // namespace prefixkv::cli
