// Clock: the only way server and agent code read the time, so tests can fake it.
// Times are milliseconds since the Unix epoch (wall) or since an arbitrary
// point (monotonic).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace tide {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMs() const = 0;       // wall clock, Unix epoch
  virtual int64_t MonotonicMs() const = 0;  // never goes back
};

class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override;
  int64_t MonotonicMs() const override;
  static SystemClock* Default();
};

// Thread-safe fake: time moves only when told.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ms = 1'700'000'000'000) : now_(start_ms) {}
  int64_t NowMs() const override { return now_.load(); }
  int64_t MonotonicMs() const override { return now_.load(); }
  void Advance(int64_t ms) { now_ += ms; }

 private:
  std::atomic<int64_t> now_;
};

// RFC 3339 UTC with milliseconds: "2026-12-02T17:16:50.123Z". 0 gives "".
std::string FormatTime(int64_t unix_ms);

}  // namespace tide
