// The core's money: cards, admission into escrow, per-second metering,
// provider earnings and fees, node loss, budgets, and the ledger across a
// restart.
#include <gtest/gtest.h>

#include <random>

#include "ledger/cards.h"
#include "server/testing/core_fixture.h"

namespace tide::server {
namespace {

using api::JobStatus;
using ledger::kMicrosPerCredit;
using ledger::Micros;

class MoneyTest : public CoreTest {
 protected:
  // RTX4090 at 10 credits per GPU-hour, 10% fee, spot 60% off.
  void SetUp() override {
    CoreTest::SetUp();
    ledger::PriceList prices;
    prices.per_gpu_hour["RTX4090"] = 10 * kMicrosPerCredit;
    prices.fee_ppm = 100'000;
    prices.spot_discount_ppm = 600'000;
    ASSERT_TRUE(core_->SetPrices(AdminCaller(), prices).ok());
  }
  // A user with `credits` redeemed from a card.
  Caller Funded(const std::string& name, Micros credits) {
    Caller c = User(name);
    auto codes = core_->MintCards(AdminCaller(), 1, credits, 0);
    EXPECT_TRUE(codes.ok()) << codes.status().ToString();
    auto got = core_->Redeem(c, codes->at(0));
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    return c;
  }
  void ExpectBalanced() {
    ledger::Totals t;
    Status st = core_->CheckLedger(&t);
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(t.issued, t.users + t.escrow + t.providers + t.platform);
  }
  // Advances the clock in 1 s steps, heartbeating `nodes`, and lets the core
  // meter.
  void Run(int64_t ms, const std::vector<std::string>& nodes) {
    const Caller admin{Scope::kAdmin, "admin"};
    for (int64_t t = 0; t < ms; t += 1000) {
      clock_.Advance(1000);
      for (const auto& n : nodes) {
        // The agent reports what it runs: every job leased to it.
        api::Heartbeat hb;
        for (const auto& status : core_->ListNodes()) {
          if (status.node.id != n) continue;
          for (const auto& [job_id, gpus] : status.leases) {
            hb.running.push_back({job_id, core_->GetJob(admin, job_id)->attempt});
          }
        }
        ASSERT_TRUE(core_->Heartbeat(n, hb).ok());
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(60));  // a tick or two
  }
};

TEST_F(MoneyTest, CardsRedeemOnceAndRefuseWhatIsNotACard) {
  Caller alice = User("alice");
  Caller bob = User("bob");
  auto codes = core_->MintCards(AdminCaller(), 2, 25 * kMicrosPerCredit, 0);
  ASSERT_TRUE(codes.ok());
  ASSERT_EQ(codes->size(), 2u);
  EXPECT_EQ(*core_->Redeem(alice, codes->at(0)), 25 * kMicrosPerCredit);
  EXPECT_EQ(core_->Balance(alice).available, 25 * kMicrosPerCredit);
  // Used, mistyped, unknown: refused, nothing moves.
  EXPECT_EQ(core_->Redeem(bob, codes->at(0)).status().code(), Code::kConflict);
  std::string typo = codes->at(1);
  typo[7] = typo[7] == 'Z' ? 'Y' : 'Z';
  auto bad = core_->Redeem(bob, typo);
  EXPECT_EQ(bad.status().field(), "code");
  EXPECT_TRUE(core_->Redeem(bob, NewCardCode()).status().IsNotFound());
  EXPECT_EQ(core_->Balance(bob).available, 0);
  // A bearer code: bob may redeem the second card.
  EXPECT_TRUE(core_->Redeem(bob, codes->at(1)).ok());
  // Expired.
  auto soon = core_->MintCards(AdminCaller(), 1, kMicrosPerCredit, clock_.NowMs() + 1000);
  clock_.Advance(2000);
  auto expired = core_->Redeem(bob, soon->at(0));
  EXPECT_EQ(expired.status().code(), Code::kConflict);
  EXPECT_NE(expired.status().message().find("expired"), std::string::npos);
  EXPECT_EQ(core_->MintCards(AdminCaller(), 0, 1, 0).status().field(), "count");
  ExpectBalanced();
}

TEST_F(MoneyTest, ConcurrentRedemptionsOfOneCodeGiveOneSuccess) {
  auto codes = core_->MintCards(AdminCaller(), 1, 7 * kMicrosPerCredit, 0);
  std::vector<Caller> users;
  for (int i = 0; i < 8; ++i) users.push_back(User("u" + std::to_string(i)));
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (auto& u : users) {
    threads.emplace_back([&, u] {
      if (core_->Redeem(u, codes->at(0)).ok()) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 1);
  Micros total = 0;
  for (auto& u : users) total += core_->Balance(u).available;
  EXPECT_EQ(total, 7 * kMicrosPerCredit);
  ExpectBalanced();
}

TEST_F(MoneyTest, SubmissionBeyondTheBalanceIsRefusedWithTheNumbers) {
  Caller alice = Funded("alice", 5 * kMicrosPerCredit);
  AddNode("n1", 2);
  api::JobSpec spec = Spec(2);
  spec.max_runtime_s = 3600;
  spec.grace_s = 0;
  auto r = core_->SubmitJob(alice, spec, "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInsufficientCredit);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("up to 20 credits"), std::string::npos) << m;  // 2 GPUs x 10/h x 1 h
  EXPECT_NE(m.find("5 are available"), std::string::npos) << m;
  EXPECT_TRUE(core_->ListJobs(alice, "", "", 10, "").first.empty()) << "nothing half-created";
  // No max_runtime and no max_cost: the default cap (100 credits) applies.
  auto uncapped = core_->SubmitJob(alice, Spec(1), "");
  EXPECT_EQ(uncapped.status().code(), Code::kInsufficientCredit);
  EXPECT_NE(uncapped.status().message().find("default cap"), std::string::npos);
  // Within the balance: held in escrow.
  spec.max_runtime_s = 600;  // 2 x 10 x 1/6 h = 3.333333
  auto ok = core_->SubmitJob(alice, spec, "");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(core_->Balance(alice).escrow, 3'333'333);
  EXPECT_EQ(core_->Balance(alice).available, 5 * kMicrosPerCredit - 3'333'333);
  ExpectBalanced();
}

TEST_F(MoneyTest, RunningTimeIsChargedBySecondAndSplitWithTheProvider) {
  Caller alice = Funded("alice", 100 * kMicrosPerCredit);
  Caller carol = User("carol");  // the provider
  std::string node = AddNode(Machine("rig", 2), carol.subject);
  api::JobSpec spec = Spec(2);
  spec.max_runtime_s = 3600;
  spec.grace_s = 0;
  auto job = core_->SubmitJob(alice, spec, "");
  ASSERT_TRUE(job.ok());
  const std::string id = job->first.id;
  EXPECT_EQ(job->first.attempts.at(0).rate, 10 * kMicrosPerCredit);
  ASSERT_TRUE(core_->JobEvent(node, id, {1, "running", std::nullopt, "", ""}).ok());
  Run(90'000, {node});
  // Metered while it runs, up to the last heartbeat.
  EXPECT_GT(core_->MoneyOf(id).cost, 0);
  ASSERT_TRUE(core_->JobEvent(node, id, {1, "exited", 0, "", ""}).ok());
  // 2 GPUs x 90 s at 10 credits per GPU-hour = 0.5 credits exactly.
  JobMoney m = core_->MoneyOf(id);
  EXPECT_EQ(m.cost, 500'000);
  EXPECT_EQ(m.escrow, 0) << "the rest went back";
  EXPECT_EQ(core_->Balance(alice).available, 100 * kMicrosPerCredit - 500'000);
  EXPECT_EQ(core_->Balance(alice).escrow, 0);
  auto earned = core_->Earnings(carol);
  ASSERT_EQ(earned.size(), 1u);
  EXPECT_EQ(earned[0].gross, 500'000);
  EXPECT_EQ(earned[0].fee, 50'000);
  EXPECT_EQ(earned[0].earned, 450'000);
  EXPECT_EQ(earned[0].gpu_ms, 180'000);
  auto usage = core_->Usage(alice, 0);
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_EQ(usage[0].cost, 500'000);
  EXPECT_EQ(usage[0].gpu_model, "RTX4090");
  EXPECT_TRUE(core_->Earnings(alice).empty());
  ExpectBalanced();
}

TEST_F(MoneyTest, TimeAfterALostNodesLastHeartbeatIsChargedToNobody) {
  Caller alice = Funded("alice", 100 * kMicrosPerCredit);
  std::string lost = AddNode("lost", 1);
  std::string other = AddNode("other", 1);
  api::JobSpec spec = Spec(1);
  spec.max_runtime_s = 3600;
  auto job = core_->SubmitJob(alice, spec, "");
  std::string id = job->first.id;
  std::string node = job->first.node_id;
  std::string alive = node == lost ? other : lost;
  ASSERT_TRUE(core_->JobEvent(node, id, {1, "running", std::nullopt, "", ""}).ok());
  Run(36'000, {node, alive});  // 36 s of one GPU at 10/h = 0.1 credits
  Run(15'000, {alive});        // its node goes silent and is declared lost
  ASSERT_TRUE(Eventually([&] { return core_->GetJob(alice, id)->attempt == 2; }));
  EXPECT_EQ(core_->MoneyOf(id).cost, 100'000);
  ExpectBalanced();
}

TEST_F(MoneyTest, MaxCostStopsTheJobWithBudgetExceeded) {
  Caller alice = Funded("alice", 100 * kMicrosPerCredit);
  std::string node = AddNode("n1", 1);
  api::JobSpec spec = Spec(1);
  spec.max_cost = 100'000;  // 36 s at 10 credits per GPU-hour
  spec.grace_s = 5;
  auto job = core_->SubmitJob(alice, spec, "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  std::string id = job->first.id;
  EXPECT_EQ(core_->Balance(alice).escrow, 100'000);
  ASSERT_EQ(core_->PollWork(node, 0)->assignments.size(), 1u);
  ASSERT_TRUE(core_->JobEvent(node, id, {1, "running", std::nullopt, "", ""}).ok());
  Run(20'000, {node});
  EXPECT_FALSE(core_->GetJob(alice, id)->cancel_requested);
  Run(12'000, {node});
  ASSERT_TRUE(Eventually([&] { return core_->GetJob(alice, id)->cancel_requested; }));
  auto work = core_->PollWork(node, 0);
  ASSERT_EQ(work->cancels.size(), 1u);
  EXPECT_EQ(work->cancels[0].reason, "budget_exceeded");
  Run(5'000, {node});
  ASSERT_TRUE(core_->JobEvent(node, id, {1, "exited", 143, "budget_exceeded", ""}).ok());
  auto done = core_->GetJob(alice, id);
  EXPECT_EQ(done->status, JobStatus::kFailed);
  EXPECT_EQ(done->reason, "budget_exceeded");
  EXPECT_LE(core_->MoneyOf(id).cost, 100'000) << "never past max_cost";
  EXPECT_EQ(core_->Balance(alice).escrow, 0);
  ExpectBalanced();
}

TEST_F(MoneyTest, LedgerSurvivesRestartAndPreemptedSpotPaysWhatItRan) {
  Caller alice = Funded("alice", 50 * kMicrosPerCredit);
  std::string node = AddNode("n1", 1);
  api::JobSpec spot = Spec(1);
  spot.tier = "spot";
  spot.max_runtime_s = 3600;
  auto s = core_->SubmitJob(alice, spot, "");
  std::string id = s->first.id;
  EXPECT_EQ(s->first.attempts.at(0).rate, 4 * kMicrosPerCredit);  // 60% off
  ASSERT_EQ(core_->PollWork(node, 0)->assignments.size(), 1u);
  ASSERT_TRUE(core_->JobEvent(node, id, {1, "running", std::nullopt, "", ""}).ok());
  Run(45'000, {node});  // 45 s at 4/h = 0.05 credits
  api::JobSpec urgent = Spec(1);
  urgent.max_runtime_s = 60;
  ASSERT_TRUE(core_->SubmitJob(alice, urgent, "").ok());
  ASSERT_TRUE(core_->GetJob(alice, id)->preempt_requested);
  ASSERT_TRUE(core_->JobEvent(node, id, {1, "exited", 143, "preempted", ""}).ok());
  EXPECT_EQ(core_->MoneyOf(id).cost, 50'000);
  BalanceInfo before = core_->Balance(alice);
  Reboot();
  BalanceInfo after = core_->Balance(alice);
  EXPECT_EQ(after.available, before.available);
  EXPECT_EQ(after.escrow, before.escrow);
  EXPECT_EQ(core_->MoneyOf(id).cost, 50'000);
  ExpectBalanced();
}

TEST_F(MoneyTest, DailyCapRefusesUpFrontAndStopsRunningWork) {
  Caller alice = Funded("alice", 100 * kMicrosPerCredit);
  std::string node = AddNode("n1", 1);
  ASSERT_TRUE(core_->SetDailyCap(AdminCaller(), alice.subject, 200'000).ok());  // 0.2 credits a day
  api::JobSpec big = Spec(1);
  big.max_runtime_s = 3600;  // may cost 10
  auto refused = core_->SubmitJob(alice, big, "");
  ASSERT_EQ(refused.status().code(), Code::kInsufficientCredit);
  EXPECT_NE(refused.status().message().find("daily cap is 0.2 credits"), std::string::npos)
      << refused.status().message();
  // A job within the cap runs until the day's spend reaches it.
  api::JobSpec small = Spec(1);
  small.max_cost = 150'000;
  small.grace_s = 2;
  auto job = core_->SubmitJob(alice, small, "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  std::string id = job->first.id;
  ASSERT_EQ(core_->PollWork(node, 0)->assignments.size(), 1u);
  ASSERT_TRUE(core_->JobEvent(node, id, {1, "running", std::nullopt, "", ""}).ok());
  Run(10'000, {node});
  EXPECT_FALSE(core_->GetJob(alice, id)->cancel_requested);
  ASSERT_TRUE(core_->SetDailyCap(AdminCaller(), alice.subject, 50'000).ok());  // lowered: 18 s worth
  Run(10'000, {node});
  ASSERT_TRUE(Eventually([&] { return core_->GetJob(alice, id)->cancel_requested; }));
  EXPECT_EQ(core_->GetJob(alice, id)->cancel_reason, "budget_exceeded");
  // The account says what the day's spend is against the cap.
  BalanceInfo b = core_->Balance(alice);
  EXPECT_EQ(b.daily_cap, 50'000);
  EXPECT_GE(b.spent_today, 50'000);
  ASSERT_TRUE(core_->SetDailyCap(AdminCaller(), alice.subject, 0).ok());
  EXPECT_EQ(core_->Balance(alice).daily_cap, 0);
  EXPECT_EQ(core_->DailyCap(alice.subject), 0);
  EXPECT_NE(core_->Metrics().find("tide_credits{account=\"issued\"} 100"), std::string::npos)
      << core_->Metrics();
  ExpectBalanced();
}

// Random sequences of what happens to money, with restarts between steps:
// balances never go below zero and the ledger always balances.
TEST_F(MoneyTest, PropertyRandomLifecyclesKeepTheLedgerBalanced) {
  std::mt19937 rng(7);
  std::vector<Caller> users;
  for (int i = 0; i < 3; ++i) users.push_back(Funded("p" + std::to_string(i), 20 * kMicrosPerCredit));
  std::vector<std::string> nodes = {AddNode("a", 2), AddNode("b", 2)};
  Micros issued = 60 * kMicrosPerCredit;
  for (int step = 0; step < 150; ++step) {
    int op = static_cast<int>(rng() % 9);
    const Caller& u = users[rng() % users.size()];
    if (op == 7) {  // a card minted and redeemed
      Micros value = 1 + static_cast<Micros>(rng() % 5'000'000);
      auto codes = core_->MintCards(AdminCaller(), 1, value, 0);
      ASSERT_TRUE(codes.ok());
      ASSERT_TRUE(core_->Redeem(u, codes->at(0)).ok());
      issued += value;
    } else if (op == 8) {  // one node goes silent until it is lost, then comes back
      Run(12'000, {nodes[0]});
    } else if (op <= 1) {
      api::JobSpec spec = Spec(1 + static_cast<int>(rng() % 2));
      spec.max_runtime_s = 60 + static_cast<int64_t>(rng() % 600);
      if (rng() % 3 == 0) spec.tier = "spot";
      if (rng() % 4 == 0) spec.max_cost = 10'000 + static_cast<Micros>(rng() % 100'000);
      auto r = core_->SubmitJob(u, spec, "");
      if (!r.ok()) {
        ASSERT_EQ(r.status().code(), Code::kInsufficientCredit) << r.status().ToString();
      }
    } else if (op == 2) {
      for (const auto& n : nodes) {
        auto work = core_->PollWork(n, 0);
        for (const auto& a : work->assignments) {
          (void)core_->JobEvent(n, a.job.id, {a.job.attempt, "running", std::nullopt, "", ""});
        }
        for (const auto& c : work->cancels) {
          (void)core_->JobEvent(n, c.job_id, {c.attempt, "exited", 143, c.reason, ""});
        }
      }
    } else if (op == 3) {
      Run(1000 * static_cast<int64_t>(1 + rng() % 30), nodes);
    } else if (op == 4) {
      auto jobs = core_->ListJobs(u, "running", "", 10, "").first;
      if (!jobs.empty()) {
        const auto& j = jobs[rng() % jobs.size()];
        (void)core_->JobEvent(j.node_id, j.id, {j.attempt, "exited", static_cast<int>(rng() % 2), "", ""});
      }
    } else if (op == 5) {
      auto jobs = core_->ListJobs(u, "", "", 10, "").first;
      if (!jobs.empty()) (void)core_->CancelJob(u, jobs[rng() % jobs.size()].id);
    } else {
      Reboot();
    }
    for (const auto& c : users) ASSERT_GE(core_->Balance(c).available, 0);
    ledger::Totals t;
    Status st = core_->CheckLedger(&t);
    ASSERT_TRUE(st.ok()) << "step " << step << ": " << st.ToString();
    ASSERT_EQ(t.issued, issued);
  }
  // Nothing was charged twice: no attempt cost more than its GPU-time at
  // its rate.
  for (const auto& l : core_->Usage(Caller{Scope::kAdmin, "admin"}, 0)) {
    int64_t end = l.finished_at > 0 ? l.finished_at : clock_.NowMs();
    EXPECT_LE(l.cost, ledger::CostOf(l.rate, l.gpus * (end - l.started_at))) << l.job_id;
  }
}

// RTX4090 at 0.4 and A100 at 10 credits per GPU-hour, no fee.
ledger::PriceList TwoModels() {
  ledger::PriceList prices;
  prices.per_gpu_hour["RTX4090"] = 400'000;
  prices.per_gpu_hour["A100"] = 10 * kMicrosPerCredit;
  return prices;
}

api::JobSpec Hour(int gpus) {
  api::JobSpec s = Spec(gpus);
  s.max_runtime_s = 3600;
  s.grace_s = 0;
  return s;
}

TEST_F(MoneyTest, TheHoldIsTheWorstCaseOverTheNodesThatCanRunTheJob) {
  ASSERT_TRUE(core_->SetPrices(AdminCaller(), TwoModels()).ok());
  api::RegisterRequest partition = Machine("gpu", 8);
  partition.labels["partition"] = "gpu";
  AddNode(partition);
  AddNode(Machine("a100", 1, "A100"));
  Caller alice = Funded("alice", 100 * kMicrosPerCredit);
  // Only the partition's RTX4090 node can run 8 GPUs labelled so: 8 x 0.4
  // for the hour, not 8 x 10.
  api::JobSpec eight = Hour(8);
  eight.constraints["partition"] = "gpu";
  auto job = core_->SubmitJob(alice, eight, "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(core_->Balance(alice).escrow, 8 * 400'000);
  // One GPU of any model could land on the A100: that is its worst case.
  auto one = core_->SubmitJob(alice, Hour(1), "");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(core_->MoneyOf(one->first.id).escrow, 10 * kMicrosPerCredit);
  ExpectBalanced();
}

TEST_F(MoneyTest, ADearerNodeThatJoinsLaterIsHeldForBeforeTheJobRunsThere) {
  ASSERT_TRUE(core_->SetPrices(AdminCaller(), TwoModels()).ok());
  std::string rtx = AddNode(Machine("rtx", 1));
  Caller alice = Funded("alice", 5 * kMicrosPerCredit);
  auto first = core_->SubmitJob(alice, Hour(1), "");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(core_->JobEvent(rtx, first->first.id, {1, "running", std::nullopt, "", ""}).ok());
  auto waiting = core_->SubmitJob(alice, Hour(1), "");
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(core_->MoneyOf(waiting->first.id).escrow, 400'000);
  // An A100 joins: running the waiting job there needs 9.6 more credits
  // in escrow than alice has left.
  AddNode(Machine("a100", 1, "A100"));
  auto refused = core_->GetJob(alice, waiting->first.id);
  EXPECT_EQ(refused->status, JobStatus::kQueued);
  EXPECT_NE(refused->pending_reason.find("placing it on a100"), std::string::npos)
      << refused->pending_reason;
  EXPECT_EQ(core_->MoneyOf(waiting->first.id).escrow, 400'000);
  // With credit it runs there, its escrow grown to the A100's worst case.
  auto codes = core_->MintCards(AdminCaller(), 1, 20 * kMicrosPerCredit, 0);
  ASSERT_TRUE(core_->Redeem(alice, codes->at(0)).ok());
  ASSERT_TRUE(Eventually([&] {
    return core_->GetJob(alice, waiting->first.id)->status == JobStatus::kStarting;
  }));
  EXPECT_EQ(core_->MoneyOf(waiting->first.id).escrow, 10 * kMicrosPerCredit);
  ExpectBalanced();
}

TEST_F(MoneyTest, AnEstimateForAShapeNoNodeCanHoldSaysWhyAsTheQueueWould) {
  AddNode(Machine("rtx", 4));
  Caller alice = Funded("alice", 100 * kMicrosPerCredit);
  api::JobSpec h100 = Hour(1);
  h100.resources.gpu_types = {"H100"};
  auto e = core_->EstimateCost(h100, 1, 0);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->expected_start, 0);
  auto job = core_->SubmitJob(alice, h100, "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto queued = core_->GetJob(alice, job->first.id);
  ASSERT_TRUE(queued.ok()) << queued.status().ToString();
  EXPECT_EQ(e->never_starts, queued->pending_reason);
  EXPECT_NE(e->never_starts.find("H100"), std::string::npos) << e->never_starts;
  // A shape that fits has no such reason.
  auto fits = core_->EstimateCost(Hour(2), 1, 0);
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(fits->never_starts, "");
  EXPECT_GT(fits->expected_start, 0);
}

}  // namespace
}  // namespace tide::server
