// RateLimiter: a token bucket per key (a token's id, a client's address),
// so that one caller's flood is refused with 429 and Retry-After before it
// reaches the core, while every other caller keeps its own allowance.
//
// A bucket holds up to `burst` requests and refills at `per_second`; a
// request takes one. Memory is bounded: past `max_keys` buckets, those
// that have refilled are forgotten (they would allow a burst anyway), then
// the fullest.
//
// Thread safety: every method may be called from any thread at once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace tide::server {

struct RateLimit {
  double per_second = 0;  // 0: unlimited
  double burst = 0;
};

// "200/s", "200/s:400" (burst 400; default twice the rate), "off". Returns
// false for anything else.
bool ParseRateLimit(const std::string& text, RateLimit* out);

class RateLimiter {
 public:
  explicit RateLimiter(RateLimit limit, size_t max_keys = 100'000);

  // True if `key` may make a request at `now_ms` (monotonic); else false
  // and *retry_after_ms says when one will be allowed.
  bool Allow(const std::string& key, int64_t now_ms, int64_t* retry_after_ms);

  bool enabled() const { return limit_.per_second > 0; }
  size_t keys() const;

 private:
  struct Bucket {
    double tokens = 0;
    int64_t at_ms = 0;
  };
  void Prune(int64_t now_ms);

  const RateLimit limit_;
  const size_t max_keys_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;  // guarded by mu_
};

// InFlightLimiter: how many requests each key (a token's id) has open at
// once, at most `max`: one client's many long requests (log follows, waits,
// slow uploads) cannot take every connection thread from the others.
//
// Thread safety: every method may be called from any thread at once.
class InFlightLimiter {
 public:
  explicit InFlightLimiter(int max) : max_(max) {}  // 0: unlimited

  // A slot for `key`, given back when the last copy of it is destroyed;
  // null when `key` has `max` open already. The limiter must outlive it.
  std::shared_ptr<void> Acquire(const std::string& key);
  int open(const std::string& key) const;
  int max() const { return max_; }

 private:
  void Release(const std::string& key);

  const int max_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, int> open_;  // guarded by mu_; no zero entries
};

// "256" (requests at once) or "off". Returns false for anything else.
bool ParseInFlightLimit(const std::string& text, int* out);

}  // namespace tide::server
