// The audit log through the core: admin, money and token actions are
// recorded with who, what, when and from where, in the transaction of the
// action; refused actions leave no entry; secrets never appear; the log
// survives a restart and is read by time.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ledger/cards.h"
#include "server/testing/core_fixture.h"

namespace tide::server {
namespace {

class AuditTest : public CoreTest {
 protected:
  std::vector<std::string> Actions(int64_t since = 0) {
    std::vector<std::string> out;
    for (const AuditEntry& e : core_->AuditLog(since, 1000)) out.push_back(e.action);
    return out;
  }
};

TEST_F(AuditTest, RecordsWhoDidWhatFromWhere) {
  Caller admin = AdminCaller();
  admin.token_id = "at-0123456789ab";
  admin.address = "203.0.113.9";
  auto bob = core_->CreateUser(admin, "bob");
  ASSERT_TRUE(bob.ok());
  auto caller = core_->Authenticate(bob->second);
  ASSERT_TRUE(caller.ok());
  caller->address = "198.51.100.4";
  auto codes = core_->MintCards(admin, 2, 5 * ledger::kMicrosPerCredit, 0);
  ASSERT_TRUE(codes.ok());
  ASSERT_TRUE(core_->Redeem(*caller, codes->at(0)).ok());
  auto ci = core_->CreateToken(*caller, "ci", "read", 0);
  ASSERT_TRUE(ci.ok());
  ASSERT_TRUE(core_->RotateToken(*caller, "ci", 60'000).ok());
  ASSERT_TRUE(core_->RevokeToken(*caller, "ci").ok());
  auto join = core_->CreateJoinToken(admin, bob->first.id, 0);
  ASSERT_TRUE(join.ok());
  ASSERT_TRUE(core_->SetWeight(admin, bob->first.id, 2).ok());
  ASSERT_TRUE(core_->SetDailyCap(admin, bob->first.id, ledger::kMicrosPerCredit).ok());

  auto log = core_->AuditLog(0, 1000);
  std::vector<std::string> actions;
  for (const AuditEntry& e : log) actions.push_back(e.action);
  EXPECT_EQ(actions, (std::vector<std::string>{"user.create", "card.mint", "card.redeem",
                                               "token.create", "token.rotate", "token.revoke",
                                               "join_token.create", "user.weight",
                                               "user.daily_cap"}));
  ASSERT_EQ(log.size(), 9u);
  EXPECT_EQ(log[0].actor, "admin");
  EXPECT_EQ(log[0].token, "at-0123456789ab");
  EXPECT_EQ(log[0].address, "203.0.113.9");
  EXPECT_EQ(log[0].target, bob->first.id);
  EXPECT_EQ(log[0].detail["name"], "bob");
  EXPECT_EQ(log[2].actor, bob->first.id);
  EXPECT_EQ(log[2].address, "198.51.100.4");
  EXPECT_EQ(log[2].detail["credits"], "5");
  EXPECT_EQ(log[3].target, ci->first.id);
  EXPECT_EQ(log[3].detail["scope"], "read");
  for (size_t i = 1; i < log.size(); ++i) EXPECT_EQ(log[i].seq, log[i - 1].seq + 1);

  // Nothing in the log is a secret: not a token, not a card code.
  std::string all;
  for (const AuditEntry& e : log) all += ToJson(e).dump();
  for (const std::string& secret : {bob->second, ci->second, *join, codes->at(0), codes->at(1)}) {
    EXPECT_EQ(all.find(secret), std::string::npos) << secret;
  }
  std::string canonical = *ledger::CanonicalCardCode(codes->at(0));
  EXPECT_EQ(all.find(canonical), std::string::npos);
}

TEST_F(AuditTest, RefusedActionsLeaveNoEntry) {
  ASSERT_TRUE(core_->CreateUser(AdminCaller(), "carol").ok());
  EXPECT_FALSE(core_->CreateUser(AdminCaller(), "carol").ok());  // taken
  EXPECT_FALSE(core_->SetWeight(AdminCaller(), "u-nobody", 2).ok());
  EXPECT_FALSE(core_->RevokeJoinToken(AdminCaller(), "jt-000000000000").ok());
  EXPECT_FALSE(core_->MintCards(AdminCaller(), 0, 1, 0).ok());
  Caller carol = User("carol2");
  EXPECT_FALSE(core_->Redeem(carol, "TIDE-0000-0000-0000-0000-0000-0000-00").ok());
  EXPECT_EQ(Actions(), (std::vector<std::string>{"user.create", "user.create"}));
}

TEST_F(AuditTest, SurvivesARestartAndIsReadByTime) {
  ASSERT_TRUE(core_->CreateUser(AdminCaller(), "dave").ok());
  clock_.Advance(60'000);
  const int64_t later = clock_.NowMs();
  Caller dave = User("erin");
  ASSERT_TRUE(core_->CreateToken(dave, "ci", "", 0).ok());
  Reboot();
  EXPECT_EQ(Actions(), (std::vector<std::string>{"user.create", "user.create", "token.create"}));
  EXPECT_EQ(Actions(later), (std::vector<std::string>{"user.create", "token.create"}));
  // At most `limit`: the newest.
  auto last = core_->AuditLog(0, 1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].action, "token.create");
  // New entries go on from the stored sequence.
  ASSERT_TRUE(core_->CreateUser(AdminCaller(), "frank").ok());
  auto all = core_->AuditLog(0, 1000);
  EXPECT_EQ(all.back().seq, 4);
}

}  // namespace
}  // namespace tide::server
