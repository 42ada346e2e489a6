#include "common/decimal.h"

#include <gtest/gtest.h>

#include <limits>

namespace tide {
namespace {

TEST(DecimalTest, MillionthsPrintAsDecimals) {
  EXPECT_EQ(FormatMillionths(0), "0");
  EXPECT_EQ(FormatMillionths(12'500'000), "12.5");
  EXPECT_EQ(FormatMillionths(1), "0.000001");
  EXPECT_EQ(FormatMillionths(-2'000'000), "-2");
  EXPECT_EQ(FormatMillionths(-1'250'000), "-1.25");
  EXPECT_EQ(FormatCredits(100'000'000), "100");
  EXPECT_EQ(FormatMillionths(std::numeric_limits<int64_t>::min()), "-9223372036854.775808");
}

}  // namespace
}  // namespace tide
