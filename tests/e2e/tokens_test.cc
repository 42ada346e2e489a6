// Tokens a user controls, through the CLI and real HTTP: a token of scope
// submit submits but cannot make tokens, one of scope read only looks, a
// revoked one is a 401 at the next request, rotation keeps the old secret
// for its grace, `tide token ls` never shows a secret, and a node whose
// credentials the operator revokes stops and its job runs elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <csignal>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

using nlohmann::json;

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

class TokensE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer();
    cluster_.StartAgent("a1", "1xRTX4090:24GB");
    token_ = cluster_.NewUser("alice");
  }
  std::string Create(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"token", "create"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = cluster_.Cli(args, token_);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return FirstLine(r.out);
  }
  Cluster cluster_;
  std::string token_;
};

TEST_F(TokensE2eTest, ScopesDecideWhatATokenMayDo) {
  std::string ci = Create({"--name", "ci", "--scope", "submit", "--expires", "30d"});
  std::string viewer = Create({"--name", "viewer", "--scope", "read"});
  ASSERT_EQ(ci.rfind("tide_u_", 0), 0u) << ci;

  CliResult sub = cluster_.Cli({"submit", "-q", "--", "true"}, ci);
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  std::string id = FirstLine(sub.out);
  CliResult wait = cluster_.Cli({"wait", id}, ci);
  EXPECT_EQ(wait.exit_code, 0) << wait.err;
  CliResult mint = cluster_.Cli({"token", "create", "--name", "wider"}, ci);
  EXPECT_NE(mint.exit_code, 0);
  EXPECT_NE(mint.err.find("needs a token of scope full"), std::string::npos) << mint.err;

  CliResult look = cluster_.Cli({"status", id}, viewer);
  EXPECT_EQ(look.exit_code, 0) << look.err;
  CliResult refused = cluster_.Cli({"submit", "-q", "--", "true"}, viewer);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("scope is read"), std::string::npos) << refused.err;
  CliResult redeem = cluster_.Cli({"redeem", "NOPE-NOPE"}, ci);
  EXPECT_NE(redeem.err.find("needs a token of scope full"), std::string::npos) << redeem.err;

  // The list names them, their scopes and last use, never a secret.
  CliResult ls = cluster_.Cli({"token", "ls"}, token_);
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_NE(ls.out.find("main (this one)"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("ci"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("submit"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("in 29d"), std::string::npos) << ls.out;
  for (const std::string& secret : {token_, ci, viewer}) {
    EXPECT_EQ(ls.out.find(secret.substr(7)), std::string::npos);
  }
  CliResult json_ls = cluster_.Cli({"token", "ls", "-o", "json"}, token_);
  json list = json::parse(json_ls.out, nullptr, false);
  ASSERT_TRUE(list.is_array()) << json_ls.out;
  EXPECT_EQ(list.size(), 3u);
  for (const auto& t : list) EXPECT_FALSE(t.contains("token")) << t.dump();

  // Bad input names the flag's field.
  CliResult bad = cluster_.Cli({"token", "create", "--name", "x", "--scope", "root"}, token_);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("scope"), std::string::npos) << bad.err;
  CliResult bad_expiry = cluster_.Cli({"token", "create", "--name", "x", "--expires", "soon"}, token_);
  EXPECT_NE(bad_expiry.err.find("expires"), std::string::npos) << bad_expiry.err;
}

TEST_F(TokensE2eTest, ARevokedTokenIsRefusedAtOnceAndRotationHasAGrace) {
  std::string ci = Create({"--name", "ci", "--scope", "submit"});
  ASSERT_EQ(cluster_.Cli({"ls"}, ci).exit_code, 0);
  CliResult revoke = cluster_.Cli({"token", "revoke", "ci"}, token_);
  ASSERT_EQ(revoke.exit_code, 0) << revoke.err;
  CliResult after = cluster_.Cli({"ls"}, ci);
  EXPECT_NE(after.exit_code, 0);
  EXPECT_NE(after.err.find("invalid token"), std::string::npos) << after.err;

  CliResult rotate = cluster_.Cli({"token", "rotate", "--grace", "1h"}, token_);
  ASSERT_EQ(rotate.exit_code, 0) << rotate.err;
  std::string fresh = FirstLine(rotate.out);
  EXPECT_NE(fresh, token_);
  EXPECT_NE(rotate.err.find("works until"), std::string::npos) << rotate.err;
  EXPECT_EQ(cluster_.Cli({"ls"}, fresh).exit_code, 0);
  EXPECT_EQ(cluster_.Cli({"ls"}, token_).exit_code, 0) << "the old one within its grace";
  // Rotating again without grace ends the newest old one at once.
  CliResult now = cluster_.Cli({"token", "rotate"}, fresh);
  ASSERT_EQ(now.exit_code, 0) << now.err;
  EXPECT_NE(cluster_.Cli({"ls"}, fresh).exit_code, 0);
  EXPECT_EQ(cluster_.Cli({"ls"}, FirstLine(now.out)).exit_code, 0);
}

TEST_F(TokensE2eTest, TheOperatorRevokesJoinTokensAndNodes) {
  std::string admin = cluster_.admin_token();
  CliResult made = cluster_.Cli({"admin", "join-token", "--expires", "2h", "-o", "json"}, admin);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  json join = json::parse(made.out, nullptr, false);
  ASSERT_TRUE(join.is_object()) << made.out;
  CliResult ls = cluster_.Cli({"admin", "join-token", "ls"}, admin);
  EXPECT_NE(ls.out.find(join.value("id", "?")), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("in 119m"), std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.find("tide_j_"), std::string::npos) << "ls shows no secret, makes no token";
  CliResult revoke = cluster_.Cli({"admin", "join-token", "revoke", join.value("id", "")}, admin);
  ASSERT_EQ(revoke.exit_code, 0) << revoke.err;
  try {
    cluster_.StartAgent("late", "1xRTX4090:24GB", {"--join-token", join.value("token", "")});
    ADD_FAILURE() << "an agent joined with a revoked join token";
  } catch (const std::runtime_error&) {
    EXPECT_NE(ReadAll(cluster_.dir() + "/agent-late.log").find("rejected the join token"),
              std::string::npos);
  }

  // A running job on a1; a1 is revoked; the job runs on a2.
  cluster_.StartAgent("a2", "1xRTX4090:24GB", {"--label", "spare=yes"});
  auto alice = cluster_.ClientFor(token_);
  ASSERT_TRUE(cluster_.Cli({"admin", "node", "drain", "a2"}, admin).exit_code == 0);
  std::string id = SubmitOk(*alice, {{"command", {"sleep", "30"}}});
  ASSERT_TRUE(Eventually([&] {
    auto j = alice->GetJob(id);
    return j.ok() && j->status == api::JobStatus::kRunning;
  }));
  ASSERT_EQ(cluster_.Cli({"admin", "node", "undrain", "a2"}, admin).exit_code, 0);
  CliResult gone = cluster_.Cli({"admin", "node", "revoke", "a1"}, admin);
  ASSERT_EQ(gone.exit_code, 0) << gone.err;
  EXPECT_NE(gone.out.find("revoked"), std::string::npos) << gone.out;
  EXPECT_TRUE(Eventually([&] {
    auto j = alice->GetJob(id);
    return j.ok() && j->status == api::JobStatus::kRunning && j->attempt == 2;
  })) << api::JobStatusName(alice->GetJob(id)->status);
  EXPECT_EQ(alice->GetJob(id)->attempts.front().reason, "node_revoked");
  // The revoked agent learns it at its next heartbeat and stops.
  EXPECT_TRUE(Eventually([&] { return !cluster_.agent("a1").Running(); }, std::chrono::seconds(30)))
      << ReadAll(cluster_.dir() + "/agent-a1.log");
  (void)alice->CancelJob(id);

  // A user's token leaked: the operator finds it and revokes it.
  std::string leaked = Create({"--name", "leaked", "--scope", "read"});
  CliResult users = cluster_.Cli({"admin", "token", "ls", "--user", "alice", "-o", "json"}, admin);
  ASSERT_EQ(users.exit_code, 0) << users.err;
  json tokens = json::parse(users.out, nullptr, false);
  ASSERT_TRUE(tokens.is_array()) << users.out;
  std::string leaked_id;
  for (const auto& t : tokens) {
    if (t.value("name", "") == "leaked") leaked_id = t.value("id", "");
  }
  ASSERT_EQ(leaked_id.rfind("ut-", 0), 0u) << users.out;
  EXPECT_EQ(users.out.find(leaked.substr(7)), std::string::npos) << "never a secret";
  CliResult table_ls = cluster_.Cli({"admin", "token", "ls"}, admin);
  EXPECT_NE(table_ls.out.find("leaked"), std::string::npos) << table_ls.out;
  ASSERT_EQ(cluster_.Cli({"admin", "token", "revoke", leaked_id}, admin).exit_code, 0);
  EXPECT_NE(cluster_.Cli({"ls"}, leaked).exit_code, 0);
  EXPECT_EQ(cluster_.Cli({"ls"}, token_).exit_code, 0);
  CliResult unknown = cluster_.Cli({"admin", "token", "revoke", "ut-000000000000"}, admin);
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("no user token"), std::string::npos) << unknown.err;

  // All of it is in the audit log: who, what, from where; no secret.
  CliResult audit = cluster_.Cli({"admin", "audit", "--since", "1h", "-o", "json"}, admin);
  ASSERT_EQ(audit.exit_code, 0) << audit.err;
  json entries = json::parse(audit.out, nullptr, false);
  ASSERT_TRUE(entries.is_array()) << audit.out;
  std::vector<std::string> actions;
  for (const auto& e : entries) {
    if (e.value("actor", "") != "admin") continue;
    actions.push_back(e.value("action", ""));
    EXPECT_EQ(e.value("address", ""), "127.0.0.1") << e.dump();
    EXPECT_EQ(e.value("token", "").rfind("at-", 0), 0u) << e.dump();
  }
  for (const char* action : {"join_token.create", "join_token.revoke", "node.drain", "node.undrain",
                             "node.revoke", "token.revoke"}) {
    EXPECT_NE(std::find(actions.begin(), actions.end(), action), actions.end()) << action;
  }
  EXPECT_EQ(audit.out.find(join.value("token", "?")), std::string::npos);
  CliResult table = cluster_.Cli({"admin", "audit"}, admin);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("node.revoke"), std::string::npos) << table.out;
  CliResult bad = cluster_.Cli({"admin", "audit", "--since", "yesterday"}, admin);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("since"), std::string::npos) << bad.err;
  CliResult user = cluster_.Cli({"admin", "audit"}, token_);
  EXPECT_NE(user.exit_code, 0) << "a user's token does not read the audit log";
}

TEST(NodeTokenE2eTest, AnAgentRenewsItsNodeTokenBeforeItEnds) {
  Cluster cluster;
  cluster.StartServer({"--node-token-life", "6s"});
  cluster.StartAgent("a1", "1xRTX4090:24GB");
  const std::string path = cluster.dir() + "/agent-a1/node.token";
  const std::string first = ReadAll(path);
  ASSERT_EQ(first.rfind("tide_n_", 0), 0u) << first;
  // Past the first token's life: the agent is still here, on a newer token.
  std::this_thread::sleep_for(std::chrono::seconds(8));
  EXPECT_TRUE(cluster.agent("a1").Running()) << ReadAll(cluster.dir() + "/agent-a1.log");
  EXPECT_NE(ReadAll(path), first);
  EXPECT_NE(ReadAll(cluster.dir() + "/agent-a1.log").find("node token renewed"), std::string::npos);
  auto alice = cluster.ClientFor(cluster.NewUser("alice"));
  std::string id = SubmitOk(*alice, {{"command", {"true"}}});
  EXPECT_TRUE(Eventually([&] {
    auto j = alice->GetJob(id);
    return j.ok() && j->status == api::JobStatus::kCompleted;
  }));
  CliResult bad = cluster.Cli({"server", "--listen", "127.0.0.1:1", "--data-dir",
                               cluster.dir() + "/bad", "--node-token-life", "soon"},
                              "");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE((bad.out + bad.err).find("--node-token-life"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace tide::e2e
