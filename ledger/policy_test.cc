#include "ledger/policy.h"

#include <gtest/gtest.h>

namespace tide::ledger {
namespace {

constexpr Micros kCredit = kMicrosPerCredit;
constexpr Micros kDefaultCap = 100 * kCredit;

Limits L(int64_t gpus, int64_t max_runtime_s, int64_t grace_s, Micros max_cost = 0) {
  Limits l;
  l.gpus = gpus;
  l.max_runtime_s = max_runtime_s;
  l.grace_s = grace_s;
  l.max_cost = max_cost;
  return l;
}

TEST(WorstCase, RuntimeAndGraceAtTheRateForEveryTry) {
  // 2 GPUs x (1 h + 30 s) at 10 credits per GPU-hour, and once more per retry.
  Limits l = L(2, 3600, 30);
  EXPECT_EQ(WorstCase(l, 10 * kCredit, kDefaultCap), CostOf(10 * kCredit, 2 * 3630 * 1000));
  l.retry_times = 2;
  EXPECT_EQ(WorstCase(l, 10 * kCredit, kDefaultCap), 3 * CostOf(10 * kCredit, 2 * 3630 * 1000));
  EXPECT_EQ(AttemptCap(l, 10 * kCredit, kDefaultCap), CostOf(10 * kCredit, 2 * 3630 * 1000));
}

TEST(WorstCase, MaxCostCapsAndStandsAloneWithoutARuntime) {
  Limits l = L(1, 36'000, 0, 5 * kCredit);
  EXPECT_EQ(WorstCase(l, 10 * kCredit, kDefaultCap), 5 * kCredit);
  l.max_cost = 500 * kCredit;  // the runtime is the smaller bound
  EXPECT_EQ(WorstCase(l, 10 * kCredit, kDefaultCap), 100 * kCredit);
  l.max_runtime_s = 0;  // max_cost alone, even above the default cap
  EXPECT_EQ(WorstCase(l, 10 * kCredit, kDefaultCap), 500 * kCredit);
  l.max_cost = 0;  // neither: the default cap, never unlimited
  EXPECT_EQ(WorstCase(l, 10 * kCredit, kDefaultCap), kDefaultCap);
}

TEST(WorstCase, FreeGpusHoldNothing) {
  Limits l = L(8, 3600, 0);
  EXPECT_EQ(WorstCase(l, 0, kDefaultCap), 0);
  EXPECT_EQ(AttemptCap(l, 0, kDefaultCap), 0);
}

TEST(ChargePiece, RunningTotalsRoundLikeOneCharge) {
  PriceList prices;
  prices.fee_ppm = 100'000;  // 10%
  Micros charged = 0, fee = 0, provider = 0;
  // One GPU at 1 credit per hour, charged every second for an hour.
  for (int64_t ms = 1000; ms <= 3'600'000; ms += 1000) {
    PieceCharge c = ChargePiece(prices, kCredit, ms, charged, fee, kDefaultCap);
    EXPECT_EQ(c.due, c.split.provider + c.split.platform);
    charged += c.due;
    fee += c.split.platform;
    provider += c.split.provider;
  }
  EXPECT_EQ(charged, kCredit);
  EXPECT_EQ(fee, SplitCharge(prices, kCredit).platform);
  EXPECT_EQ(provider, kCredit - fee);
}

TEST(ChargePiece, NeverPastWhatMayBeSpentNorTwice) {
  PriceList prices;
  PieceCharge c = ChargePiece(prices, 10 * kCredit, 3'600'000, 0, 0, 4 * kCredit);
  EXPECT_EQ(c.due, 4 * kCredit);
  EXPECT_EQ(c.split.provider, 4 * kCredit);
  // Already charged up to this point: nothing more is due.
  EXPECT_EQ(ChargePiece(prices, 10 * kCredit, 3'600'000, 10 * kCredit, 0, kDefaultCap).due, 0);
  EXPECT_EQ(ChargePiece(prices, 10 * kCredit, 0, 0, 0, kDefaultCap).due, 0);
  EXPECT_EQ(ChargePiece(prices, 0, 3'600'000, 0, 0, kDefaultCap).due, 0);
  EXPECT_EQ(ChargePiece(prices, 10 * kCredit, 3'600'000, 0, 0, 0).due, 0);
}

TEST(DailyCap, SpentAndHeldAndTheNewHoldStayWithinIt) {
  EXPECT_TRUE(CheckDailyCap(0, 1000 * kCredit, 0, 1000 * kCredit).ok());  // no cap
  EXPECT_TRUE(CheckDailyCap(10 * kCredit, 3 * kCredit, 2 * kCredit, 5 * kCredit).ok());
  Status over = CheckDailyCap(10 * kCredit, 3 * kCredit, 2 * kCredit, 6 * kCredit);
  EXPECT_EQ(over.code(), Code::kInsufficientCredit);
  EXPECT_NE(over.message().find("daily cap is 10 credits: today 3 were spent and 2 are held"),
            std::string::npos)
      << over.message();
  EXPECT_NE(over.message().find("may cost up to 6"), std::string::npos) << over.message();
}

TEST(InsufficientFor, SaysWhatWhyHowMuchAndWhatToDo) {
  Status s = InsufficientFor("the job", 12 * kCredit, "its max_cost", 2'500'000, "lower max_cost");
  EXPECT_EQ(s.code(), Code::kInsufficientCredit);
  EXPECT_EQ(s.message(),
            "the job may cost up to 12 credits (its max_cost), but 2.5 are available; redeem a "
            "card (tide redeem CODE) or lower max_cost");
}

TEST(UtcDay, CountsFromMidnight) {
  EXPECT_EQ(UtcDay(0), 0);
  EXPECT_EQ(UtcDay(86'399'999), 0);
  EXPECT_EQ(UtcDay(86'400'000), 1);
}

}  // namespace
}  // namespace tide::ledger
