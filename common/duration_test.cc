#include "common/duration.h"

#include <gtest/gtest.h>

#include <string>

namespace tide {
namespace {

int64_t Seconds(const std::string& text) {
  auto d = ParseDurationSeconds(text);
  EXPECT_TRUE(d.ok()) << text << ": " << d.status().ToString();
  return d.ok() ? *d : -1;
}

TEST(ParseDurationSeconds, AcceptsUnitsAndBareSeconds) {
  EXPECT_EQ(Seconds("90"), 90);
  EXPECT_EQ(Seconds("90s"), 90);
  EXPECT_EQ(Seconds("30m"), 1800);
  EXPECT_EQ(Seconds("2h"), 7200);
  EXPECT_EQ(Seconds("1h30m"), 5400);
  EXPECT_EQ(Seconds("1d"), 86400);
  EXPECT_EQ(Seconds("1d2h3m4s"), 86400 + 7200 + 180 + 4);
  EXPECT_EQ(Seconds("0"), 0);
  EXPECT_EQ(Seconds("0s"), 0);
  EXPECT_EQ(Seconds("007m"), 420);
}

TEST(ParseDurationSeconds, RejectsMalformed) {
  for (const char* bad : {"", "-5", "+5", "1.5h", "5x", "h", "1h30", "s", " 1h", "1h ", "1 h",
                          "5 fortnights", "1H", "2hours", "1h-30m"}) {
    auto d = ParseDurationSeconds(bad);
    EXPECT_FALSE(d.ok()) << "accepted \"" << bad << "\" as " << (d.ok() ? *d : 0);
    if (!d.ok()) {
      EXPECT_EQ(d.status().code(), Code::kInvalidArgument) << bad;
      EXPECT_FALSE(d.status().message().empty()) << bad;
    }
  }
}

TEST(ParseDurationSeconds, ErrorsExplainTheProblem) {
  EXPECT_NE(ParseDurationSeconds("1h30").status().message().find("missing unit"),
            std::string::npos);
  EXPECT_NE(ParseDurationSeconds("5x").status().message().find("unknown unit 'x'"),
            std::string::npos);
  EXPECT_NE(ParseDurationSeconds("").status().message().find("empty"), std::string::npos);
}

TEST(ParseDurationSeconds, RejectsOverflow) {
  for (const char* big : {"9223372036854775807", "99999999999999999999", "9223372036854775807s",
                          "200000000000000000d", "106751991167301d", "3000000000000000h",
                          "4611686018427387903s4611686018427387903s"}) {
    auto d = ParseDurationSeconds(big);
    EXPECT_FALSE(d.ok()) << big << " -> " << (d.ok() ? *d : 0);
  }
  // Large but representable values still parse.
  EXPECT_EQ(Seconds("36500d"), int64_t{36500} * 86400);
  EXPECT_EQ(Seconds("1000000000000"), int64_t{1000000000000});
}

TEST(FormatDurationSeconds, ComposesUnits) {
  EXPECT_EQ(FormatDurationSeconds(0), "0s");
  EXPECT_EQ(FormatDurationSeconds(-5), "0s");
  EXPECT_EQ(FormatDurationSeconds(45), "45s");
  EXPECT_EQ(FormatDurationSeconds(60), "1m");
  EXPECT_EQ(FormatDurationSeconds(90), "1m30s");
  EXPECT_EQ(FormatDurationSeconds(5400), "1h30m");
  EXPECT_EQ(FormatDurationSeconds(7200), "2h");
  EXPECT_EQ(FormatDurationSeconds(86400), "1d");
  EXPECT_EQ(FormatDurationSeconds(86400 + 3661), "1d1h1m1s");
}

TEST(FormatDurationSeconds, RoundTripsThroughParse) {
  for (int64_t s :
       {int64_t{1}, int64_t{59}, int64_t{61}, int64_t{3599}, int64_t{3600}, int64_t{5400},
        int64_t{86399}, int64_t{86400}, int64_t{90061}, int64_t{30} * 86400}) {
    EXPECT_EQ(Seconds(FormatDurationSeconds(s)), s) << FormatDurationSeconds(s);
  }
}

}  // namespace
}  // namespace tide
