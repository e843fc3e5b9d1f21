// HeadWaiter: rides out a restart of the head while a client follows a job's or run's output.
//
// A call that fails with Unavailable is repeated, with a back-off doubling from 100 ms to 2 s, until the head
// answers or the outage has lasted `max_wait`; `out` says once when the outage starts ("<prefix>the head is
// unreachable (<reason>); waiting for it") and once when it ends ("<prefix>the head is back"). The caller keeps its
// offsets, so no output is lost or repeated.
//
// Example:
//   HeadWaiter waiter("[torus] ");
//   auto run = waiter.Retry([&] { return http.GetRun(id); });
//
// Thread-safety: not thread-safe; one per follower.
#pragma once

#include <chrono>
#include <iostream>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace torus::client {

class HeadWaiter {
 public:
  static constexpr std::chrono::milliseconds kFirstDelay{100};
  static constexpr std::chrono::milliseconds kMaxDelay{2000};
  static constexpr std::chrono::milliseconds kMaxWait{120'000};

  // `prefix` starts each message ("[torus] " for runs, "" for jobs); a zero `max_wait` never waits.
  explicit HeadWaiter(std::string prefix, std::chrono::milliseconds max_wait = kMaxWait, std::ostream* out = &std::cerr)
      : prefix_(std::move(prefix)), max_wait_(max_wait), out_(out) {}

  // call()'s result (an absl::StatusOr or absl::Status) once it is anything but Unavailable, or its last
  // Unavailable error when the head stayed away for max_wait.
  template <typename Call>
  auto Retry(Call call) -> decltype(call()) {
    while (true) {
      auto result = call();
      if (!WaitAgain(StatusOf(result))) return result;
    }
  }

 private:
  template <typename T>
  static absl::Status StatusOf(const absl::StatusOr<T>& result) { return result.status(); }
  static absl::Status StatusOf(const absl::Status& result) { return result; }

  // After a call's status: whether to call again (having slept); says when an outage starts and ends.
  bool WaitAgain(const absl::Status& status);

  std::string prefix_;
  std::chrono::milliseconds max_wait_;
  std::ostream* out_;
  std::optional<std::chrono::steady_clock::time_point> outage_since_;  // set while the head is unreachable
  std::chrono::milliseconds delay_ = kFirstDelay;
};

}  // namespace torus::client
