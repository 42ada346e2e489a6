#include "server/http/rate_limiter.h"

#include <gtest/gtest.h>

namespace tide::server {
namespace {

TEST(RateLimit, Parses) {
  RateLimit r;
  ASSERT_TRUE(ParseRateLimit("200/s", &r));
  EXPECT_EQ(r.per_second, 200);
  EXPECT_EQ(r.burst, 400);
  ASSERT_TRUE(ParseRateLimit("0.5/s:3", &r));
  EXPECT_EQ(r.per_second, 0.5);
  EXPECT_EQ(r.burst, 3);
  ASSERT_TRUE(ParseRateLimit("off", &r));
  EXPECT_EQ(r.per_second, 0);
  for (const char* bad : {"", "200", "/s", "-1/s", "0/s", "x/s", "10/s:", "10/s:0", "10/m", "10/s:2x"}) {
    EXPECT_FALSE(ParseRateLimit(bad, &r)) << bad;
  }
}

TEST(RateLimiter, ABurstThenTheRateAndEachKeyHasItsOwn) {
  RateLimiter limiter({10, 5});
  int64_t retry = 0;
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(limiter.Allow("a", 1000, &retry)) << i;
  EXPECT_FALSE(limiter.Allow("a", 1000, &retry));
  EXPECT_EQ(retry, 100);  // one request per 100 ms
  EXPECT_TRUE(limiter.Allow("b", 1000, &retry)) << "another key is not slowed";
  EXPECT_FALSE(limiter.Allow("a", 1050, &retry));
  EXPECT_EQ(retry, 50);
  EXPECT_TRUE(limiter.Allow("a", 1100, &retry));
  EXPECT_FALSE(limiter.Allow("a", 1100, &retry));
  // A long pause refills to the burst, no more.
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(limiter.Allow("a", 100'000, &retry)) << i;
  EXPECT_FALSE(limiter.Allow("a", 100'000, &retry));
}

TEST(RateLimiter, OffAllowsEverything) {
  RateLimiter limiter({});
  int64_t retry = 0;
  for (int i = 0; i < 10'000; ++i) ASSERT_TRUE(limiter.Allow("a", 0, &retry));
  EXPECT_EQ(limiter.keys(), 0u);
}

TEST(RateLimiter, MemoryStaysBounded) {
  RateLimiter limiter({1, 2}, /*max_keys=*/100);
  int64_t retry = 0;
  for (int i = 0; i < 10'000; ++i) limiter.Allow("k" + std::to_string(i), i, &retry);
  EXPECT_LE(limiter.keys(), 101u);
}

TEST(InFlightLimiter, AtMostMaxOpenPerKeyUntilTheyEnd) {
  InFlightLimiter limiter(2);
  auto a1 = limiter.Acquire("a");
  auto a2 = limiter.Acquire("a");
  ASSERT_TRUE(a1 && a2);
  EXPECT_FALSE(limiter.Acquire("a")) << "a third at once is refused";
  EXPECT_TRUE(limiter.Acquire("b")) << "another key has its own";
  EXPECT_EQ(limiter.open("a"), 2);
  auto copy = a1;  // a streamed answer keeps the slot as long as it streams
  a1.reset();
  EXPECT_FALSE(limiter.Acquire("a"));
  copy.reset();
  auto a3 = limiter.Acquire("a");
  EXPECT_TRUE(a3);
  a2.reset();
  a3.reset();
  EXPECT_EQ(limiter.open("a"), 0);
  InFlightLimiter off(0);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(off.Acquire("a"));
}

TEST(InFlightLimiter, ParsesACountOrOff) {
  int n = -1;
  ASSERT_TRUE(ParseInFlightLimit("256", &n));
  EXPECT_EQ(n, 256);
  ASSERT_TRUE(ParseInFlightLimit("off", &n));
  EXPECT_EQ(n, 0);
  for (const char* bad : {"", "0", "-1", "12x", "1e3", "99999999"}) {
    EXPECT_FALSE(ParseInFlightLimit(bad, &n)) << bad;
  }
}

}  // namespace
}  // namespace tide::server
