// The Tokens room through the core: scopes, names, expiry, revocation that
// is effective at the next request, rotation with a grace period, last use,
// join tokens that expire and nodes whose credentials are revoked.
#include <gtest/gtest.h>

#include <algorithm>

#include "server/testing/core_fixture.h"

namespace tide::server {
namespace {

class TokensTest : public CoreTest {
 protected:
  // A user and its main token's secret.
  std::pair<Caller, std::string> NewUser(const std::string& name) {
    auto u = core_->CreateUser(AdminCaller(), name);
    EXPECT_TRUE(u.ok()) << u.status().ToString();
    auto caller = core_->Authenticate(u->second);
    EXPECT_TRUE(caller.ok());
    return {*caller, u->second};
  }
};

TEST_F(TokensTest, ATokenHasTheScopeItWasMadeWithAndOnlyFullScopeManagesTokens) {
  auto [alice, main_secret] = NewUser("alice");
  EXPECT_EQ(alice.access, Access::kFull);
  clock_.Advance(1);  // listed oldest first
  auto ci = core_->CreateToken(alice, "ci", "submit", 0);
  ASSERT_TRUE(ci.ok()) << ci.status().ToString();
  EXPECT_EQ(ci->first.name, "ci");
  EXPECT_EQ(ci->first.scope, "submit");
  EXPECT_EQ(ci->second.rfind("tide_u_", 0), 0u);
  auto as_ci = core_->Authenticate(ci->second);
  ASSERT_TRUE(as_ci.ok());
  EXPECT_EQ(as_ci->subject, alice.subject);
  EXPECT_EQ(as_ci->access, Access::kSubmit);
  EXPECT_EQ(as_ci->token_id, ci->first.id);

  // A narrower token cannot mint a wider one, nor revoke its owner's others.
  EXPECT_EQ(core_->CreateToken(*as_ci, "wider", "", 0).status().code(), Code::kPermissionDenied);
  EXPECT_EQ(core_->RevokeToken(*as_ci, "main").code(), Code::kPermissionDenied);

  auto list = core_->ListTokens(alice);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "main");
  EXPECT_EQ(list[0].scope, "full");
  EXPECT_EQ(list[1].name, "ci");
  // Another user sees none of them.
  auto [bob, bob_secret] = NewUser("bob");
  EXPECT_EQ(core_->ListTokens(bob).size(), 1u);
  EXPECT_EQ(core_->RevokeToken(bob, "ci").code(), Code::kNotFound);
}

TEST_F(TokensTest, BadNamesScopesAndExpiriesAreRefusedByField) {
  auto [alice, secret] = NewUser("alice");
  auto bad_name = core_->CreateToken(alice, "Has Space", "", 0);
  EXPECT_EQ(bad_name.status().field(), "name");
  auto bad_scope = core_->CreateToken(alice, "x", "admin", 0);
  EXPECT_EQ(bad_scope.status().field(), "scope");
  EXPECT_NE(bad_scope.status().message().find("read"), std::string::npos);
  auto past = core_->CreateToken(alice, "x", "read", clock_.NowMs() - 1);
  EXPECT_EQ(past.status().field(), "expires");
  ASSERT_TRUE(core_->CreateToken(alice, "x", "read", 0).ok());
  EXPECT_EQ(core_->CreateToken(alice, "x", "read", 0).status().code(), Code::kConflict);
  EXPECT_EQ(core_->CreateToken(alice, "main", "read", 0).status().code(), Code::kConflict);
}

TEST_F(TokensTest, ARevokedTokenIsRefusedAtTheNextRequestAndAfterARestart) {
  auto [alice, secret] = NewUser("alice");
  auto ci = core_->CreateToken(alice, "ci", "read", 0);
  ASSERT_TRUE(ci.ok());
  ASSERT_TRUE(core_->Authenticate(ci->second).ok());
  ASSERT_TRUE(core_->RevokeToken(alice, ci->first.id).ok());  // by id
  EXPECT_EQ(core_->Authenticate(ci->second).status().code(), Code::kUnauthenticated);
  Reboot();
  EXPECT_EQ(core_->Authenticate(ci->second).status().code(), Code::kUnauthenticated);
  EXPECT_TRUE(core_->Authenticate(secret).ok());
}

TEST_F(TokensTest, AnExpiredTokenIsRefusedAndNoLongerListed) {
  auto [alice, secret] = NewUser("alice");
  auto brief = core_->CreateToken(alice, "brief", "read", clock_.NowMs() + 60'000);
  ASSERT_TRUE(brief.ok());
  EXPECT_TRUE(core_->Authenticate(brief->second).ok());
  clock_.Advance(60'000);
  auto refused = core_->Authenticate(brief->second);
  EXPECT_EQ(refused.status().code(), Code::kUnauthenticated);
  EXPECT_NE(refused.status().message().find("expired"), std::string::npos);
  EXPECT_EQ(refused.status().message().find(brief->second), std::string::npos);
  EXPECT_EQ(core_->ListTokens(alice).size(), 1u);
}

TEST_F(TokensTest, RotationGivesANewSecretAndTheOldOneLivesOutItsGrace) {
  auto [alice, old_secret] = NewUser("alice");
  clock_.Advance(1);  // listed oldest first
  auto rotated = core_->RotateToken(alice, "main", 3'600'000);
  ASSERT_TRUE(rotated.ok()) << rotated.status().ToString();
  EXPECT_EQ(rotated->first.name, "main");
  EXPECT_NE(rotated->second, old_secret);
  EXPECT_TRUE(core_->Authenticate(rotated->second).ok());
  EXPECT_TRUE(core_->Authenticate(old_secret).ok()) << "within the grace period";
  auto list = core_->ListTokens(alice);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "main~old");
  EXPECT_EQ(list[0].expires_at, clock_.NowMs() + 3'600'000);
  clock_.Advance(3'600'000);
  EXPECT_EQ(core_->Authenticate(old_secret).status().code(), Code::kUnauthenticated);
  EXPECT_TRUE(core_->Authenticate(rotated->second).ok());
  // Without grace the old one stops at once.
  auto again = core_->RotateToken(alice, "main", 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(core_->Authenticate(rotated->second).status().code(), Code::kUnauthenticated);
  EXPECT_EQ(core_->RotateToken(alice, "nope", 0).status().code(), Code::kNotFound);
  EXPECT_EQ(core_->RotateToken(alice, "main", -1).status().field(), "grace");
}

TEST_F(TokensTest, LastUseIsShownAndReachesTheStore) {
  auto [alice, secret] = NewUser("alice");
  EXPECT_EQ(core_->ListTokens(alice)[0].last_used_at, clock_.NowMs()) << "NewUser authenticated";
  clock_.Advance(120'000);
  const int64_t used = clock_.NowMs();
  ASSERT_TRUE(core_->Authenticate(secret).ok());
  EXPECT_EQ(core_->ListTokens(alice)[0].last_used_at, used);
  // The core's tick writes it; a restart still knows it.
  ASSERT_TRUE(Eventually([&] {
    auto contents = store_->LoadAll();
    for (const auto& row : contents->tokens) {
      if (row.kind == "user" && row.last_used_at == used) return true;
    }
    return false;
  }));
  Reboot();
  EXPECT_EQ(core_->ListTokens(alice)[0].last_used_at, used);
}

TEST_F(TokensTest, JoinTokensExpireAndAreRevokedByTheOperator) {
  auto day = core_->CreateJoinToken(AdminCaller(), "", clock_.NowMs() + 86'400'000);
  auto forever = core_->CreateJoinToken(AdminCaller(), "", 0);
  ASSERT_TRUE(day.ok() && forever.ok());
  EXPECT_EQ(core_->ListJoinTokens().size(), 2u);
  auto list = core_->ListJoinTokens();
  std::string forever_id;
  for (const auto& t : list) {
    if (t.expires_at == 0) forever_id = t.id;
  }
  ASSERT_EQ(forever_id.rfind("jt-", 0), 0u);
  ASSERT_TRUE(core_->RevokeJoinToken(AdminCaller(), forever_id).ok());
  EXPECT_EQ(core_->Authenticate(*forever).status().code(), Code::kUnauthenticated);
  EXPECT_EQ(core_->RevokeJoinToken(AdminCaller(), forever_id).code(), Code::kNotFound);
  clock_.Advance(86'400'000);
  EXPECT_EQ(core_->Authenticate(*day).status().code(), Code::kUnauthenticated);
  EXPECT_TRUE(core_->ListJoinTokens().empty());
}

TEST_F(TokensTest, ARevokedNodeLosesItsTokenAndItsJobsRunElsewhere) {
  auto alice = User("alice");
  auto join = core_->CreateJoinToken(AdminCaller());
  auto joiner = core_->Authenticate(*join);
  ASSERT_TRUE(joiner.ok());
  auto reg = core_->RegisterNode(*joiner, Machine("n1", 1));
  ASSERT_TRUE(reg.ok());
  const std::string node_token = reg->second;
  auto job = core_->SubmitJob(alice, Spec(), "");
  ASSERT_TRUE(job.ok());
  const std::string id = job->first.id;
  ASSERT_TRUE(Eventually([&] { return core_->GetJob(alice, id)->node_id == reg->first; }));

  auto revoked = core_->RevokeNode(AdminCaller(), "n1");
  ASSERT_TRUE(revoked.ok()) << revoked.status().ToString();
  EXPECT_EQ(revoked->state, api::NodeState::kLost);
  EXPECT_EQ(core_->Authenticate(node_token).status().code(), Code::kUnauthenticated);
  auto j = core_->GetJob(alice, id);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->status, api::JobStatus::kQueued);
  ASSERT_FALSE(j->attempts.empty());
  EXPECT_EQ(j->attempts.back().reason, "node_revoked");
  // It can run on another node.
  std::string n2 = AddNode("n2", 1);
  ASSERT_TRUE(Eventually([&] { return core_->GetJob(alice, id)->node_id == n2; }));
  EXPECT_EQ(core_->RevokeNode(AdminCaller(), "nope").status().code(), Code::kNotFound);
}

TEST_F(TokensTest, TheOperatorListsUsersTokensAndRevokesALeakedOne) {
  auto [alice, alice_main] = NewUser("alice");
  auto [bob, bob_main] = NewUser("bob");
  auto ci = core_->CreateToken(alice, "ci", "submit", 0);
  ASSERT_TRUE(ci.ok());
  EXPECT_EQ(core_->ListUserTokens("").size(), 3u);
  auto alices = core_->ListUserTokens(alice.subject);
  ASSERT_EQ(alices.size(), 2u);
  for (const TokenInfo& t : alices) EXPECT_EQ(t.subject, alice.subject);

  Caller op = AdminCaller();
  op.address = "192.0.2.1";
  ASSERT_TRUE(core_->RevokeUserToken(op, ci->first.id).ok());
  EXPECT_EQ(core_->Authenticate(ci->second).status().code(), Code::kUnauthenticated);
  EXPECT_TRUE(core_->Authenticate(alice_main).ok()) << "only that one";
  EXPECT_EQ(core_->RevokeUserToken(op, ci->first.id).code(), Code::kNotFound);
  // By id only: a name is its user's own, and other kinds are not users'.
  EXPECT_EQ(core_->RevokeUserToken(op, "main").code(), Code::kNotFound);
  auto join = core_->CreateJoinToken(AdminCaller());
  ASSERT_TRUE(join.ok());
  EXPECT_EQ(core_->RevokeUserToken(op, core_->ListJoinTokens().at(0).id).code(), Code::kNotFound);

  auto log = core_->AuditLog(0, 100);
  auto it = std::find_if(log.begin(), log.end(),
                         [](const AuditEntry& e) { return e.action == "token.revoke"; });
  ASSERT_NE(it, log.end());
  EXPECT_EQ(it->actor, "admin");
  EXPECT_EQ(it->address, "192.0.2.1");
  EXPECT_EQ(it->target, ci->first.id);
  EXPECT_EQ(it->detail["user"], alice.subject);
}

TEST_F(TokensTest, NodeTokensExpireAndAreRenewedInTime) {
  constexpr int64_t kDay = 24 * 3'600'000LL;  // the fixture's life: the default 30 days
  auto join = core_->CreateJoinToken(AdminCaller());
  auto reg = core_->RegisterNode(*core_->Authenticate(*join), Machine("n1", 1));
  ASSERT_TRUE(reg.ok());
  const std::string first = reg->second;
  auto as_first = core_->Authenticate(first);
  ASSERT_TRUE(as_first.ok());
  EXPECT_EQ(*core_->RenewNodeToken(*as_first), "") << "a fresh token is not renewed";

  clock_.Advance(21 * kDay);  // less than a third left
  auto renewed = core_->RenewNodeToken(*as_first);
  ASSERT_TRUE(renewed.ok());
  ASSERT_EQ(renewed->rfind("tide_n_", 0), 0u);
  const std::string second = *renewed;
  EXPECT_TRUE(core_->Authenticate(first).ok()) << "the old one works until the new one is used";

  // The agent lost the answer (it restarted, say) and calls with the old
  // token again: the unused renewal is dropped and another one issued.
  auto again = core_->RenewNodeToken(*as_first);
  ASSERT_TRUE(again.ok());
  ASSERT_FALSE(again->empty());
  EXPECT_FALSE(core_->Authenticate(second).ok()) << "the renewal it never took up";
  const std::string third = *again;

  // It calls with the new one: the old one ends after a short grace.
  auto as_third = core_->Authenticate(third);
  ASSERT_TRUE(as_third.ok());
  EXPECT_EQ(as_third->subject, reg->first);
  EXPECT_EQ(*core_->RenewNodeToken(*as_third), "");
  EXPECT_TRUE(core_->Authenticate(first).ok()) << "requests under way finish";
  clock_.Advance(6 * 60'000);
  EXPECT_EQ(core_->Authenticate(first).status().code(), Code::kUnauthenticated);
  EXPECT_TRUE(core_->Authenticate(third).ok());

  // One never renewed ends with its life.
  clock_.Advance(31 * kDay);
  EXPECT_EQ(core_->Authenticate(third).status().code(), Code::kUnauthenticated);
  // User tokens are not node tokens.
  Caller alice = User("alice");
  EXPECT_EQ(*core_->RenewNodeToken(alice), "");
}

}  // namespace
}  // namespace tide::server
