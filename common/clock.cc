#include "common/clock.h"

#include <chrono>
#include <ctime>

namespace tide {

int64_t SystemClock::NowMs() const {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

int64_t SystemClock::MonotonicMs() const {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

SystemClock* SystemClock::Default() {
  static SystemClock clock;
  return &clock;
}

std::string FormatTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "";
  time_t secs = static_cast<time_t>(unix_ms / 1000);
  struct tm tm_utc;
  gmtime_r(&secs, &tm_utc);
  char buf[40];
  size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm_utc);
  snprintf(buf + n, sizeof(buf) - n, ".%03dZ", static_cast<int>(unix_ms % 1000));
  return buf;
}

}  // namespace tide
