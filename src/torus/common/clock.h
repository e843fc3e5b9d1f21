// Time as an interface, so that anything timed can be tested with a fake clock.
//
// Thread-safety: RealClock is thread-safe; FakeClock is thread-safe (its time is atomic).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace torus {

// Monotonic time in microseconds since an arbitrary origin, and wall time in milliseconds since the Unix epoch.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMicros() const = 0;     // monotonic
  virtual int64_t WallMillis() const = 0;    // Unix epoch, for display only
};

class RealClock final : public Clock {
 public:
  int64_t NowMicros() const override {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  int64_t WallMillis() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

// A clock that moves only when told to.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_micros = 1'000'000) : now_(start_micros) {}
  int64_t NowMicros() const override { return now_.load(); }
  int64_t WallMillis() const override { return 1'700'000'000'000 + now_.load() / 1000; }
  void AdvanceMicros(int64_t d) { now_ += d; }
  void AdvanceMillis(int64_t d) { now_ += d * 1000; }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace torus
