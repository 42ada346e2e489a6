#include "server/http/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace tide::server {

bool ParseRateLimit(const std::string& text, RateLimit* out) {
  if (text == "off") {
    *out = RateLimit{};
    return true;
  }
  size_t slash = text.find("/s");
  if (slash == std::string::npos || slash == 0) return false;
  char* end = nullptr;
  std::string rate_text = text.substr(0, slash);
  double rate = std::strtod(rate_text.c_str(), &end);
  if (end != rate_text.c_str() + rate_text.size() || !(rate > 0) || !std::isfinite(rate)) return false;
  double burst = 2 * rate;
  std::string rest = text.substr(slash + 2);
  if (!rest.empty()) {
    if (rest[0] != ':' || rest.size() == 1) return false;
    std::string burst_text = rest.substr(1);
    burst = std::strtod(burst_text.c_str(), &end);
    if (end != burst_text.c_str() + burst_text.size() || !(burst >= 1) || !std::isfinite(burst)) {
      return false;
    }
  }
  *out = RateLimit{rate, burst};
  return true;
}

RateLimiter::RateLimiter(RateLimit limit, size_t max_keys) : limit_(limit), max_keys_(max_keys) {}

bool RateLimiter::Allow(const std::string& key, int64_t now_ms, int64_t* retry_after_ms) {
  if (!enabled()) return true;
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, fresh] = buckets_.try_emplace(key, Bucket{limit_.burst, now_ms});
  Bucket& b = it->second;
  if (!fresh && now_ms > b.at_ms) {
    b.tokens = std::min(limit_.burst, b.tokens + (now_ms - b.at_ms) * limit_.per_second / 1000.0);
    b.at_ms = now_ms;
  }
  bool allowed = b.tokens >= 1;
  if (allowed) {
    b.tokens -= 1;
  } else {
    *retry_after_ms = static_cast<int64_t>(std::ceil((1 - b.tokens) * 1000.0 / limit_.per_second));
  }
  if (fresh && buckets_.size() > max_keys_) Prune(now_ms);
  return allowed;
}

size_t RateLimiter::keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buckets_.size();
}

void RateLimiter::Prune(int64_t now_ms) {
  // Forget buckets that have refilled; if still too many, the fullest.
  std::vector<std::pair<double, std::string>> fill;
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    double tokens = std::min(limit_.burst,
                             it->second.tokens + (now_ms - it->second.at_ms) * limit_.per_second / 1000.0);
    if (tokens >= limit_.burst) {
      it = buckets_.erase(it);
    } else {
      fill.emplace_back(tokens, it->first);
      ++it;
    }
  }
  if (buckets_.size() <= max_keys_) return;
  std::sort(fill.begin(), fill.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; i < fill.size() && buckets_.size() > max_keys_ * 9 / 10; ++i) {
    buckets_.erase(fill[i].second);
  }
}

std::shared_ptr<void> InFlightLimiter::Acquire(const std::string& key) {
  if (max_ <= 0) return std::make_shared<int>(0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    int& n = open_[key];
    if (n >= max_) return nullptr;
    ++n;
  }
  // The slot points at the limiter (never null, so that it tests true).
  return std::shared_ptr<void>(static_cast<void*>(this), [key](void* self) {
    static_cast<InFlightLimiter*>(self)->Release(key);
  });
}

void InFlightLimiter::Release(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(key);
  if (it != open_.end() && --it->second <= 0) open_.erase(it);
}

int InFlightLimiter::open(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(key);
  return it == open_.end() ? 0 : it->second;
}

bool ParseInFlightLimit(const std::string& text, int* out) {
  if (text == "off") {
    *out = 0;
    return true;
  }
  if (text.empty() || text.size() > 7) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  int n = std::stoi(text);
  if (n < 1) return false;
  *out = n;
  return true;
}

}  // namespace tide::server
