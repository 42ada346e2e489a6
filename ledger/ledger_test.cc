#include "ledger/ledger.h"

#include <gtest/gtest.h>

#include <random>

namespace tide::ledger {
namespace {

Transaction Tx(const std::string& kind, std::vector<Entry> entries, const std::string& job = "") {
  Transaction tx;
  tx.kind = kind;
  tx.job_id = job;
  tx.entries = std::move(entries);
  return tx;
}

TEST(Ledger, MovesCreditAndRefusesWhatWouldBreakIt) {
  Ledger l;
  auto redeem = Tx("redeem", {{kIssued, -100}, {UserAccount("u"), 100}});
  ASSERT_TRUE(l.Apply(redeem).ok());
  EXPECT_EQ(redeem.seq, 1);
  EXPECT_EQ(l.Balance(UserAccount("u")), 100);
  // Not summing to zero, one entry, a zero entry: malformed.
  auto uneven = Tx("hold", {{UserAccount("u"), -10}, {EscrowAccount("j"), 9}}, "j");
  EXPECT_EQ(l.Apply(uneven).code(), Code::kInvalidArgument);
  auto single = Tx("hold", {{UserAccount("u"), -10}});
  EXPECT_EQ(l.Apply(single).code(), Code::kInvalidArgument);
  // More than the balance: refused, naming the account, nothing changes.
  auto big = Tx("hold", {{UserAccount("u"), -101}, {EscrowAccount("j"), 101}}, "j");
  Status st = l.Apply(big);
  EXPECT_EQ(st.code(), Code::kInsufficientCredit);
  EXPECT_NE(st.message().find("user:u"), std::string::npos) << st.message();
  EXPECT_EQ(l.Balance(UserAccount("u")), 100);
  EXPECT_EQ(l.last_seq(), 1);

  auto hold = Tx("hold", {{UserAccount("u"), -60}, {EscrowAccount("j"), 60}}, "j");
  ASSERT_TRUE(l.Apply(hold).ok());
  auto charge = Tx("charge", {{EscrowAccount("j"), -40}, {ProviderAccount("p"), 36}, {kPlatform, 4}}, "j");
  ASSERT_TRUE(l.Apply(charge).ok());
  auto release = Tx("release", {{EscrowAccount("j"), -20}, {UserAccount("u"), 20}}, "j");
  ASSERT_TRUE(l.Apply(release).ok());
  EXPECT_EQ(l.Balance(EscrowAccount("j")), 0);
  EXPECT_EQ(l.Balance(UserAccount("u")), 60);
  EXPECT_EQ(l.ForJob("j").size(), 3u);
  Totals t = l.Summary();
  EXPECT_EQ(t.issued, 100);
  EXPECT_EQ(t.users, 60);
  EXPECT_EQ(t.providers, 36);
  EXPECT_EQ(t.platform, 4);
  EXPECT_TRUE(l.Check().ok());
}

TEST(Ledger, ReplayRebuildsTheSameBalancesAndRefusesGaps) {
  Ledger a;
  auto t1 = Tx("redeem", {{kIssued, -5}, {UserAccount("u"), 5}});
  auto t2 = Tx("hold", {{UserAccount("u"), -5}, {EscrowAccount("j"), 5}}, "j");
  ASSERT_TRUE(a.Apply(t1).ok());
  ASSERT_TRUE(a.Apply(t2).ok());
  Ledger b;
  for (const auto& tx : a.transactions()) {
    auto back = TransactionFromJson(ToJson(tx));
    ASSERT_TRUE(back.ok());
    ASSERT_TRUE(b.Replay(*back).ok());
  }
  EXPECT_EQ(b.Balance(EscrowAccount("j")), 5);
  EXPECT_TRUE(b.Check().ok());
  Ledger c;
  EXPECT_FALSE(c.Replay(a.transactions()[1]).ok()) << "seq 2 cannot come first";
}

// Random redeems, holds, charges and releases, as the server makes them:
// whatever the order, nothing goes below zero, every transaction sums to
// zero, and issued = users + escrow + providers + platform.
TEST(Ledger, PropertyRandomSequencesKeepEveryInvariant) {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    std::mt19937 rng(seed);
    Ledger l;
    std::vector<std::string> users = {"a", "b", "c"};
    std::vector<std::string> jobs;
    Micros issued = 0;
    for (int step = 0; step < 200; ++step) {
      int op = static_cast<int>(rng() % 4);
      const std::string user = users[rng() % users.size()];
      Micros amount = static_cast<Micros>(rng() % 1000) + 1;
      Transaction tx;
      if (op == 0) {
        tx = Tx("redeem", {{kIssued, -amount}, {UserAccount(user), amount}});
      } else if (op == 1) {
        std::string job = "j" + std::to_string(jobs.size());
        tx = Tx("hold", {{UserAccount(user), -amount}, {EscrowAccount(job), amount}}, job);
        if (l.Apply(tx).ok()) jobs.push_back(job);
        continue;
      } else if (jobs.empty()) {
        continue;
      } else {
        const std::string job = jobs[rng() % jobs.size()];
        if (op == 2) {
          Micros fee = amount / 10;
          tx = Tx("charge", {{EscrowAccount(job), -amount}, {ProviderAccount("p"), amount - fee}}, job);
          if (fee > 0) tx.entries.push_back({kPlatform, fee});
        } else {
          tx = Tx("release", {{EscrowAccount(job), -amount}, {UserAccount(user), amount}}, job);
        }
      }
      Status st = l.Apply(tx);
      if (st.ok() && tx.kind == "redeem") issued += amount;
      if (!st.ok()) {
        ASSERT_EQ(st.code(), Code::kInsufficientCredit) << st.ToString();
      }
    }
    ASSERT_TRUE(l.Check().ok()) << "seed " << seed << ": " << l.Check().ToString();
    Totals t = l.Summary();
    ASSERT_EQ(t.issued, issued);
    ASSERT_EQ(t.issued, t.users + t.escrow + t.providers + t.platform);
  }
}

}  // namespace
}  // namespace tide::ledger
