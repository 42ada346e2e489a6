#include "ledger/money.h"

#include <gtest/gtest.h>

#include "ledger/prices.h"

namespace tide::ledger {
namespace {

TEST(Credits, FormatAndParse) {
  EXPECT_EQ(FormatCredits(12'500'000), "12.5");
  EXPECT_EQ(FormatCredits(1), "0.000001");
  EXPECT_EQ(FormatCredits(0), "0");
  EXPECT_EQ(FormatCredits(-2'000'000), "-2");
  EXPECT_EQ(*ParseCredits("12.5", "v"), 12'500'000);
  EXPECT_EQ(*ParseCredits("0.000001", "v"), 1);
  EXPECT_EQ(*ParseCredits("7", "v"), 7'000'000);
  EXPECT_EQ(*ParseCredits(".5", "v"), 500'000);
  for (const char* bad : {"", "-1", "1.2.3", "1e3", "abc", "1.", "12 ", " 1", "0.0000001"}) {
    auto r = ParseCredits(bad, "value");
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().field(), "value") << bad;
  }
  EXPECT_FALSE(ParseCredits("1000000000001", "v").ok());
  EXPECT_TRUE(ParseCredits("1000000000000", "v").ok());
  EXPECT_EQ(*ParseFraction("0.1", "fee"), 100'000);
  EXPECT_EQ(*ParseFraction("1", "fee"), 1'000'000);
  EXPECT_FALSE(ParseFraction("1.5", "fee").ok());
  EXPECT_FALSE(ParseFraction("-0.1", "fee").ok());
}

TEST(Credits, CostRoundsDownOnTheExactProduct) {
  // 10 credits per GPU-hour, 8 GPUs, 12 hours.
  EXPECT_EQ(CostOf(10 * kMicrosPerCredit, 8LL * 12 * 3'600'000), 960 * kMicrosPerCredit);
  // One second of one GPU at 1 credit/h is 277.77… micro-credits.
  EXPECT_EQ(CostOf(kMicrosPerCredit, 1000), 277);
  // Metered in steps of cumulative totals, nothing drifts.
  Micros charged = 0;
  for (int64_t ms = 0; ms <= 3'600'000; ms += 1000) charged = CostOf(kMicrosPerCredit, ms);
  EXPECT_EQ(charged, kMicrosPerCredit);
  EXPECT_EQ(CostOf(0, 1000), 0);
  EXPECT_EQ(PartOf(1'000'000, 100'000), 100'000);
  EXPECT_EQ(PartOf(9, 100'000), 0);
}

TEST(Prices, RateSpotAndSplit) {
  PriceList p;
  p.per_gpu_hour["RTX4090"] = 10 * kMicrosPerCredit;
  p.spot_discount_ppm = 600'000;
  p.fee_ppm = 100'000;
  EXPECT_EQ(Rate(p, "RTX4090", 0, false), 10 * kMicrosPerCredit);
  EXPECT_EQ(Rate(p, "RTX4090", 0, true), 4 * kMicrosPerCredit);
  EXPECT_EQ(Rate(p, "RTX4090", 7 * kMicrosPerCredit, false), 7 * kMicrosPerCredit);  // the ask wins
  EXPECT_EQ(Rate(p, "H100", 0, false), 0);  // unpriced: free
  Split s = SplitCharge(p, 1'000'001);
  EXPECT_EQ(s.platform, 100'000);
  EXPECT_EQ(s.provider, 900'001);
  auto back = PriceListFromJson(ToJson(p));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->per_gpu_hour, p.per_gpu_hour);
  EXPECT_EQ(back->fee_ppm, p.fee_ppm);
  EXPECT_EQ(back->spot_discount_ppm, p.spot_discount_ppm);
  auto bad = PriceListFromJson(nlohmann::json{{"fee", "2"}});
  EXPECT_EQ(bad.status().field(), "fee");
  EXPECT_EQ(PriceListFromJson(nlohmann::json{{"per_gpu_hour", {{"H100", "x"}}}}).status().field(),
            "per_gpu_hour.H100");
}

}  // namespace
}  // namespace tide::ledger
