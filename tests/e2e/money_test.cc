// Money through the real server, agent and command line: an operator sets
// prices and mints a card, a user redeems it and runs a 2-GPU job, and is
// charged exactly seconds x rate; the provider earns that less the fee; a
// job that reaches its max_cost stops with budget_exceeded; a submission
// beyond the balance is refused with the numbers; the ledger balances
// across a kill -9 of the server.
#include <gtest/gtest.h>

#include <csignal>
#include <cmath>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

using nlohmann::json;

// Micro-credits from a JSON number of credits.
int64_t Micros(const json& v) { return std::llround(v.get<double>() * 1e6); }

class MoneyE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer();
    admin_token_ = ReadAll(cluster_.dir() + "/server/admin.token");
    admin_token_.erase(admin_token_.find_last_not_of("\n") + 1);
    CliResult prices = cluster_.Cli(
        {"admin", "prices", "set", "RTX4090=10", "--fee", "0.1", "--spot-discount", "0.6"},
        admin_token_);
    ASSERT_EQ(prices.exit_code, 0) << prices.err;
    // The agent belongs to provider bob.
    cluster_.NewUser("bob");
    CliResult join = cluster_.Cli({"admin", "join-token", "--provider", "bob"}, admin_token_);
    ASSERT_EQ(join.exit_code, 0) << join.err;
    std::string join_token = join.out.substr(0, join.out.find('\n'));
    cluster_.StartAgent("rig", "2xRTX4090:24GB", {"--join-token", join_token});
    alice_token_ = cluster_.NewUser("alice");
    alice_ = cluster_.ClientFor(alice_token_);
  }
  // A card of `credits`, redeemed by alice through the command line.
  void Fund(const std::string& credits) {
    CliResult mint =
        cluster_.Cli({"admin", "cards", "mint", "--count", "1", "--value", credits, "-o", "json"},
                     admin_token_);
    ASSERT_EQ(mint.exit_code, 0) << mint.err;
    std::string code = json::parse(mint.out).at(0).get<std::string>();
    CliResult redeem = cluster_.Cli({"redeem", code}, alice_token_);
    ASSERT_EQ(redeem.exit_code, 0) << redeem.err;
    CliResult again = cluster_.Cli({"redeem", code}, alice_token_);
    EXPECT_NE(again.exit_code, 0);
    EXPECT_NE(again.err.find("already redeemed"), std::string::npos) << again.err;
  }
  json Balance() {
    CliResult b = cluster_.Cli({"balance", "-o", "json"}, alice_token_);
    EXPECT_EQ(b.exit_code, 0) << b.err;
    return json::parse(b.out);
  }
  void ExpectLedgerBalances() {
    CliResult check = cluster_.Cli({"admin", "ledger", "check", "-o", "json"}, admin_token_);
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
    json j = json::parse(check.out);
    EXPECT_TRUE(j.value("ok", false)) << j.dump();
    EXPECT_EQ(Micros(j["issued"]), Micros(j["users"]) + Micros(j["escrow"]) +
                                       Micros(j["providers"]) + Micros(j["platform"]));
  }

  Cluster cluster_;
  std::string admin_token_;
  std::string alice_token_;
  std::unique_ptr<api::Client> alice_;
};

TEST_F(MoneyE2eTest, ChargedExactlySecondsTimesRateAndTheProviderEarnsTheRest) {
  Fund("50");
  EXPECT_EQ(Micros(Balance()["available"]), 50'000'000);
  std::string id = SubmitOk(*alice_, {{"name", "paid"},
                                      {"resources", {{"gpu_count", 2}}},
                                      {"max_runtime", "1h"},
                                      {"grace", "0s"},
                                      {"command", "sleep 2"}});
  // 2 GPUs x 1 h x 10 credits per GPU-hour, held while it runs.
  json held = Balance();
  EXPECT_EQ(Micros(held["escrow"]) + Micros(held["available"]), 50'000'000);
  api::Job done = WaitTerminal(*alice_, id);
  ASSERT_EQ(done.status, api::JobStatus::kCompleted) << done.reason;
  auto job = alice_->Call("GET", "/v1/jobs/" + id);
  ASSERT_TRUE(job.ok());
  const api::Attempt& a = done.attempts.at(0);
  int64_t expected = 10'000'000LL * 2 * (a.finished_at - a.started_at) / 3'600'000;
  EXPECT_GT(expected, 0);
  EXPECT_EQ(Micros((*job)["cost"]), expected);
  EXPECT_EQ(Micros((*job)["escrow"]), 0);
  json after = Balance();
  EXPECT_EQ(Micros(after["available"]), 50'000'000 - expected);
  EXPECT_EQ(Micros(after["escrow"]), 0);

  CliResult usage = cluster_.Cli({"usage", "-o", "json"}, alice_token_);
  ASSERT_EQ(usage.exit_code, 0) << usage.err;
  json lines = json::parse(usage.out)["lines"];
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["gpu_model"], "RTX4090");
  EXPECT_EQ(Micros(lines[0]["cost"]), expected);

  // Bob's earnings: the charge less the 10% fee.
  std::string admin_view = cluster_.Cli({"provider", "earnings", "-o", "json"}, admin_token_).out;
  json earned = json::parse(admin_view);
  ASSERT_EQ(earned["lines"].size(), 1u);
  int64_t fee = expected / 10;
  EXPECT_EQ(Micros(earned["lines"][0]["fee"]), fee);
  EXPECT_EQ(Micros(earned["lines"][0]["earned"]), expected - fee);
  // When it was earned: the provider page's chart over time.
  EXPECT_GT(earned["lines"][0]["started_at"].get<int64_t>(), 0);
  EXPECT_GE(earned["lines"][0]["finished_at"], earned["lines"][0]["started_at"]);
  ExpectLedgerBalances();

  // Operator totals for Prometheus, with the admin token only.
  auto admin = cluster_.ClientFor(admin_token_);
  auto metrics = admin->CallRaw("GET", "/metrics", "", "");
  ASSERT_TRUE(metrics.ok()) << metrics.status().ToString();
  EXPECT_NE(metrics->find("tide_credits{account=\"issued\"} 50"), std::string::npos) << *metrics;
  EXPECT_NE(metrics->find("tide_jobs{status=\"completed\"} 1"), std::string::npos) << *metrics;
  EXPECT_FALSE(alice_->CallRaw("GET", "/metrics", "", "").ok());
}

TEST_F(MoneyE2eTest, BudgetsAndBalanceAreHardLimits) {
  Fund("1");
  // 2 GPUs x 1 h at 10/h = 20 credits: refused, with the numbers.
  auto refused = alice_->SubmitJob(Spec({{"resources", {{"gpu_count", 2}}},
                                         {"max_runtime", "1h"},
                                         {"grace", "0s"},
                                         {"command", "true"}}));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kInsufficientCredit);
  EXPECT_NE(refused.status().message().find("up to 20 credits"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("1 are available"), std::string::npos);
  CliResult cli = cluster_.Cli({"submit", "--gpus", "2", "--max-runtime", "1h", "--", "true"},
                               alice_token_);
  EXPECT_NE(cli.exit_code, 0);
  EXPECT_NE(cli.err.find("redeem a card"), std::string::npos) << cli.err;

  // max_cost 0.01 credits = 3.6 s of one GPU: stopped with the notice.
  std::string id = SubmitOk(
      *alice_, {{"resources", {{"gpu_count", 1}}},
                {"max_cost", 0.01},
                {"grace", "1s"},
                {"command",
                 "trap 'echo notice: $(head -1 \"$TIDE_NOTICE_FILE\"); exit 0' TERM; "
                 "while true; do sleep 0.1; done"}});
  api::Job done = WaitTerminal(*alice_, id);
  EXPECT_EQ(done.status, api::JobStatus::kFailed);
  EXPECT_EQ(done.reason, "budget_exceeded");
  auto logs = alice_->GetLogs(id);
  ASSERT_TRUE(logs.ok());
  EXPECT_NE(logs->find("notice: reason=budget_exceeded"), std::string::npos) << *logs;
  auto job = alice_->Call("GET", "/v1/jobs/" + id);
  EXPECT_LE(Micros((*job)["cost"]), 10'000) << "never past max_cost";
  EXPECT_EQ(Micros(Balance()["available"]), 1'000'000 - Micros((*job)["cost"]));

  // The estimate of the issue: 10/h x 8 GPUs x 12 h with a 0.2 reserve.
  CliResult est = cluster_.Cli({"estimate", "--gpus", "8", "--gpu-type", "RTX4090", "--hours",
                                "12", "--reserve", "0.2", "-o", "json"},
                               alice_token_);
  ASSERT_EQ(est.exit_code, 0) << est.err;
  json e = json::parse(est.out);
  EXPECT_EQ(Micros(e["base"]), 960'000'000);
  EXPECT_EQ(Micros(e["reserve"]), 192'000'000);
  EXPECT_EQ(Micros(e["total"]), 1'152'000'000);
  ExpectLedgerBalances();
}

TEST_F(MoneyE2eTest, LedgerBalancesAfterKillNineMidJob) {
  Fund("20");
  std::string id = SubmitOk(*alice_, {{"resources", {{"gpu_count", 1}}},
                                      {"max_runtime", "10m"},
                                      {"command", "sleep 3"}});
  ASSERT_TRUE(Eventually([&] {
    auto j = alice_->GetJob(id);
    return j.ok() && j->status == api::JobStatus::kRunning;
  }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // some charges land
  cluster_.KillServer(SIGKILL);
  cluster_.StartServer();
  api::Job done = WaitTerminal(*alice_, id);
  EXPECT_EQ(done.status, api::JobStatus::kCompleted) << done.reason;
  auto job = alice_->Call("GET", "/v1/jobs/" + id);
  const api::Attempt& a = done.attempts.at(0);
  EXPECT_EQ(Micros((*job)["cost"]), 10'000'000LL * (a.finished_at - a.started_at) / 3'600'000)
      << "no double charge across the restart";
  EXPECT_EQ(Micros(Balance()["available"]), 20'000'000 - Micros((*job)["cost"]));
  ExpectLedgerBalances();
}

}  // namespace
}  // namespace tide::e2e
