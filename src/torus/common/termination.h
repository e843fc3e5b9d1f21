// SIGTERM and SIGINT for daemons: blocked in every thread from the start of main, then taken by one thread with
// WaitForTerminationSignal, so that shutdown runs as ordinary code rather than in a signal handler.
// Thread-safety: BlockTerminationSignals before any thread starts; WaitForTerminationSignal from one thread.
#pragma once

#include <pthread.h>
#include <signal.h>

namespace torus {

inline sigset_t TerminationSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  return signals;
}

// Blocks SIGTERM and SIGINT (threads started later inherit the mask) and ignores SIGPIPE.
inline void BlockTerminationSignals() {
  sigset_t signals = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// Waits for SIGTERM or SIGINT; returns its number.
inline int WaitForTerminationSignal() {
  sigset_t signals = TerminationSignals();
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  return signal_number;
}

// Waits up to `wait_ms` for SIGTERM or SIGINT; returns its number, or 0 when none came.
inline int PollTerminationSignal(long wait_ms) {
  sigset_t signals = TerminationSignals();
  const timespec timeout{.tv_sec = wait_ms / 1000, .tv_nsec = (wait_ms % 1000) * 1'000'000};
  const int signal_number = sigtimedwait(&signals, nullptr, &timeout);
  return signal_number > 0 ? signal_number : 0;
}

}  // namespace torus
