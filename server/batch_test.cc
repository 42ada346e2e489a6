// Experiments in the core: retries, batches (max_concurrent, budget,
// results, restart), dependencies, drains with eviction and checkpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "api/batch.h"
#include "server/testing/core_fixture.h"

namespace tide::server {
namespace {

using api::JobStatus;
using ledger::kMicrosPerCredit;
using ledger::Micros;

const Caller kAdmin{Scope::kAdmin, "admin"};

class ExperimentTest : public CoreTest {
 protected:
  // RTX4090 at 10 credits per GPU-hour.
  void SetUp() override {
    CoreTest::SetUp();
    ledger::PriceList prices;
    prices.per_gpu_hour["RTX4090"] = 10 * kMicrosPerCredit;
    ASSERT_TRUE(core_->SetPrices(AdminCaller(), prices).ok());
  }
  Caller Funded(const std::string& name, Micros credits) {
    Caller c = User(name);
    auto codes = core_->MintCards(AdminCaller(), 1, credits, 0);
    EXPECT_TRUE(core_->Redeem(c, codes->at(0)).ok());
    return c;
  }
  api::Job Get(const std::string& id) { return *core_->GetJob(kAdmin, id); }
  std::vector<api::Job> TrialsOf(const Caller& c, const std::string& batch) {
    auto t = core_->BatchTrials(c, batch);
    EXPECT_TRUE(t.ok());
    return t.ok() ? *t : std::vector<api::Job>{};
  }
  // Delivers what `node` has and reports it running.
  std::vector<std::string> StartAll(const std::string& node) {
    std::vector<std::string> out;
    auto work = core_->PollWork(node, 0);
    EXPECT_TRUE(work.ok());
    for (const auto& a : work->assignments) {
      EXPECT_TRUE(core_->JobEvent(node, a.job.id, {a.job.attempt, "running", std::nullopt, "", ""}).ok());
      out.push_back(a.job.id);
    }
    return out;
  }
  void Exit(const std::string& node, const std::string& id, int code, const std::string& reason = "") {
    api::Job j = Get(id);
    ASSERT_TRUE(core_->JobEvent(node, id, {j.attempt, "exited", code, reason, ""}).ok());
  }
  void ExpectBalanced() {
    ledger::Totals t;
    Status st = core_->CheckLedger(&t);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  api::BatchSpec Batch(const std::string& text) {
    auto b = api::BatchSpecFromJson(nlohmann::json::parse(text));
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return *b;
  }
  // `n` trials of one GPU, 1 h max_runtime (10 credits each at most), no grace.
  api::BatchSpec Trials(int n, const std::string& extra = "") {
    std::string jobs;
    for (int i = 0; i < n; ++i) jobs += (i ? "," : "") + std::string("{\"id\": \"t") + std::to_string(i) + "\", \"x\": " + std::to_string(i) + "}";
    return Batch(R"({"experiment_batch": "exp", )" + extra +
                 R"("template": {"command": "run {x}", "max_runtime": "1h", "grace": 0},
                    "jobs": [)" + jobs + "]}");
  }
};

TEST_F(ExperimentTest, RetriesCountOwnFailuresOnlyAndSetAttempts) {
  Caller alice = Funded("alice", 100 * kMicrosPerCredit);
  std::string n1 = AddNode("n1", 1);
  api::JobSpec spec = Spec(1);
  spec.retry_times = 2;
  spec.max_runtime_s = 60;
  auto job = core_->SubmitJob(alice, spec, "");
  ASSERT_TRUE(job.ok());
  const std::string id = job->first.id;
  // Node lost: requeued, no retry used.
  StartAll(n1);
  clock_.Advance(11'000);
  ASSERT_TRUE(Eventually([&] { return Get(id).status == JobStatus::kQueued; }));
  EXPECT_EQ(Get(id).retries, 0);
  EXPECT_EQ(Get(id).reason, "node_lost");
  std::string n2 = AddNode("n2", 1);
  // Two failures are retried; the third ends it.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Eventually([&] { return Get(id).status == JobStatus::kStarting; }));
    ASSERT_EQ(StartAll(n2).size(), 1u);
    Exit(n2, id, 3);
  }
  api::Job done = Get(id);
  EXPECT_EQ(done.status, JobStatus::kFailed);
  EXPECT_EQ(done.reason, "exit_code:3");
  EXPECT_EQ(done.retries, 2);
  EXPECT_EQ(done.attempt, 4);
  ASSERT_EQ(done.attempts.size(), 4u);
  EXPECT_EQ(done.attempts[0].reason, "node_lost");
  EXPECT_EQ(done.attempts[1].reason, "exit_code:3");
  EXPECT_EQ(done.attempts[1].exit_code, 3);
  ExpectBalanced();
}

TEST_F(ExperimentTest, TimeoutsAndCancelsAreNotRetried) {
  Caller alice = Funded("alice", 100 * kMicrosPerCredit);
  std::string n1 = AddNode("n1", 2);
  api::JobSpec spec = Spec(1);
  spec.retry_times = 3;
  spec.max_runtime_s = 60;
  auto a = core_->SubmitJob(alice, spec, "");
  auto b = core_->SubmitJob(alice, spec, "");
  StartAll(n1);
  Exit(n1, a->first.id, 143, "timeout");
  EXPECT_EQ(Get(a->first.id).status, JobStatus::kFailed);
  ASSERT_TRUE(core_->CancelJob(alice, b->first.id).ok());
  Exit(n1, b->first.id, 143, "cancelled");
  EXPECT_EQ(Get(b->first.id).status, JobStatus::kCancelled);
  EXPECT_EQ(Get(b->first.id).retries, 0);
}

TEST_F(ExperimentTest, MaxConcurrentIsNeverExceeded) {
  Caller alice = Funded("alice", 1000 * kMicrosPerCredit);
  std::string n1 = AddNode("n1", 8);
  auto r = core_->SubmitBatch(alice, Trials(6, R"("max_concurrent": 2, )"), "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->second);
  const std::string batch = r->first.batch.id;
  EXPECT_EQ(r->first.batch.trials, 6);
  auto trials = TrialsOf(alice, batch);
  ASSERT_EQ(trials.size(), 6u);
  EXPECT_EQ(trials[0].trial, "t0");
  EXPECT_EQ(trials[5].params.at("x"), "5");
  EXPECT_EQ(trials[0].spec.command[2], "run 0");
  // The trials the batch holds back are not the scheduler's yet: the
  // operator's standings count only the two it lets go.
  ASSERT_TRUE(Eventually([&] {
    int placed = 0;
    for (const auto& t : TrialsOf(alice, batch)) placed += t.status == JobStatus::kStarting;
    return placed == 2;
  }));
  UserStandings st = core_->Users();
  ASSERT_EQ(st.users.size(), 1u);
  EXPECT_EQ(st.users[0].queued_jobs, 0);
  EXPECT_EQ(st.users[0].rank, 0);
  EXPECT_EQ(st.users[0].running_jobs, 2);
  int finished = 0;
  while (finished < 6) {
    auto now = TrialsOf(alice, batch);
    int active = 0;
    for (const auto& t : now) active += t.status == JobStatus::kStarting || t.status == JobStatus::kRunning;
    EXPECT_LE(active, 2);
    for (const auto& t : now) {
      if (t.status == JobStatus::kQueued) {
        EXPECT_NE(t.pending_reason.find("max_concurrent 2"), std::string::npos) << t.pending_reason;
      }
    }
    auto started = StartAll(n1);
    ASSERT_FALSE(started.empty() && active == 0) << "nothing runs";
    for (const auto& t : now) {
      if (t.status == JobStatus::kRunning) {
        Exit(n1, t.id, 0);
        ++finished;
        break;
      }
    }
    ASSERT_TRUE(Eventually([&] {
      int a = 0;
      for (const auto& t : TrialsOf(alice, batch)) {
        a += t.status == JobStatus::kStarting || t.status == JobStatus::kRunning;
      }
      return a == std::min(2, 6 - finished);
    }));
  }
  auto info = *core_->GetBatch(alice, batch);
  EXPECT_EQ(info.status, "completed");
  EXPECT_EQ(info.counts["completed"], 6);
  EXPECT_EQ(info.escrow, 0) << "released when the last trial ended";
  ExpectBalanced();
}

TEST_F(ExperimentTest, BudgetHoldsTrialsBackAndCancelsWhatCanNeverStart) {
  // Budget 25: each trial may cost up to 10 (1 GPU-hour), so two run at once.
  Caller alice = Funded("alice", 100 * kMicrosPerCredit);
  std::string n1 = AddNode("n1", 8);
  auto r = core_->SubmitBatch(alice, Trials(5, R"("budget": 25, )"), "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string batch = r->first.batch.id;
  EXPECT_EQ(core_->Balance(alice).available, 75 * kMicrosPerCredit);
  EXPECT_EQ(StartAll(n1).size(), 2u);
  auto trials = TrialsOf(alice, batch);
  EXPECT_NE(trials[2].pending_reason.find("budget"), std::string::npos) << trials[2].pending_reason;
  // Both run 36 min (6 credits each): 13 left, one more fits, then 3 left.
  clock_.Advance(36 * 60 * 1000);
  api::Heartbeat hb;
  for (const auto& t : trials) {
    if (t.status == JobStatus::kRunning) hb.running.push_back({t.id, 1});
  }
  ASSERT_EQ(hb.running.size(), 2u);
  ASSERT_TRUE(core_->Heartbeat(n1, hb).ok());
  for (const auto& r : hb.running) Exit(n1, r.job_id, 0);
  ASSERT_TRUE(Eventually([&] { return core_->PollWork(n1, 0)->assignments.size() == 1; }));
  auto info = *core_->GetBatch(alice, batch);
  EXPECT_EQ(info.cost, 12 * kMicrosPerCredit);
  // The third costs 4: 9 left, less than a trial may cost, and nothing runs:
  // the other two can never start and are cancelled.
  trials = TrialsOf(alice, batch);
  for (const auto& t : trials) {
    if (t.status == JobStatus::kStarting) {
      ASSERT_TRUE(core_->JobEvent(n1, t.id, {1, "running", std::nullopt, "", ""}).ok());
      clock_.Advance(24 * 60 * 1000);  // 4 credits
      api::Heartbeat beat;
      beat.running.push_back({t.id, 1});
      ASSERT_TRUE(core_->Heartbeat(n1, beat).ok());
      Exit(n1, t.id, 0);
    }
  }
  ASSERT_TRUE(Eventually([&] { return core_->GetBatch(alice, batch)->status != "running"; }));
  info = *core_->GetBatch(alice, batch);
  EXPECT_EQ(info.counts["completed"], 3);
  EXPECT_EQ(info.counts["cancelled"], 2);
  EXPECT_EQ(info.cost, 16 * kMicrosPerCredit);
  EXPECT_EQ(info.escrow, 0);
  EXPECT_EQ(core_->Balance(alice).available, 100 * kMicrosPerCredit - info.cost);
  for (const auto& t : TrialsOf(alice, batch)) {
    if (t.status == JobStatus::kCancelled) {
      EXPECT_EQ(t.reason, "budget_exceeded");
    }
  }
  ExpectBalanced();
}

TEST_F(ExperimentTest, ABatchIsAcceptedWholeOrNotAtAll) {
  Caller alice = Funded("alice", 15 * kMicrosPerCredit);
  AddNode("n1", 1);
  // Without a budget the batch holds its trials' worst case: 3 x 10 > 15.
  auto r = core_->SubmitBatch(alice, Trials(3), "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInsufficientCredit);
  EXPECT_NE(r.status().message().find("up to 30 credits"), std::string::npos) << r.status().ToString();
  EXPECT_TRUE(core_->ListJobs(alice, "", "", 10, "").first.empty());
  EXPECT_TRUE(core_->ListBatches(alice).empty());
  EXPECT_EQ(core_->Balance(alice).available, 15 * kMicrosPerCredit);
  // With the same key, one batch.
  auto a = core_->SubmitBatch(alice, Trials(1), "k");
  auto b = core_->SubmitBatch(alice, Trials(1), "k");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->first.batch.id, b->first.batch.id);
  EXPECT_FALSE(b->second);
  // Others cannot see it.
  Caller bob = User("bob");
  EXPECT_TRUE(core_->GetBatch(bob, a->first.batch.id).status().IsNotFound());
  EXPECT_TRUE(core_->CancelBatch(bob, a->first.batch.id).status().IsNotFound());
  ExpectBalanced();
}

TEST_F(ExperimentTest, TenThousandTrialsInOneCall) {
  Caller alice = Funded("alice", 10 * kMicrosPerCredit);
  AddNode("n1", 4);
  nlohmann::json grid = {{"a", nlohmann::json::array()}, {"b", nlohmann::json::array()}};
  for (int i = 0; i < 100; ++i) grid["a"].push_back(i);
  for (int i = 0; i < 100; ++i) grid["b"].push_back(i);
  nlohmann::json file = {{"budget", 5},
                         {"max_concurrent", 4},
                         {"template", {{"command", "run {a} {b}"}, {"max_runtime", "1m"}}},
                         {"grid", grid}};
  auto spec = api::BatchSpecFromJson(file);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto r = core_->SubmitBatch(alice, *spec, "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->first.batch.trials, 10'000);
  EXPECT_EQ(core_->BatchTrials(alice, r->first.batch.id)->size(), 10'000u);
  auto info = *core_->GetBatch(alice, r->first.batch.id);
  EXPECT_EQ(info.counts["starting"], 4);
  EXPECT_EQ(info.counts["queued"], 9'996);
  ASSERT_TRUE(core_->CancelBatch(alice, r->first.batch.id).ok());
  info = *core_->GetBatch(alice, r->first.batch.id);
  EXPECT_EQ(info.counts["cancelled"], 10'000);
  EXPECT_EQ(info.status, "cancelled");
  EXPECT_EQ(core_->Balance(alice).available, 10 * kMicrosPerCredit);
  ExpectBalanced();
}

TEST_F(ExperimentTest, ABatchSurvivesARestart) {
  Caller alice = Funded("alice", 100 * kMicrosPerCredit);
  std::string n1 = AddNode("n1", 4);
  auto r = core_->SubmitBatch(alice, Trials(4, R"("max_concurrent": 1, "budget": 50, )"), "");
  ASSERT_TRUE(r.ok());
  const std::string batch = r->first.batch.id;
  ASSERT_EQ(StartAll(n1).size(), 1u);
  Reboot();
  auto info = *core_->GetBatch(alice, batch);
  EXPECT_EQ(info.counts["running"], 1);
  EXPECT_EQ(info.escrow, 50 * kMicrosPerCredit);
  EXPECT_EQ(info.batch.max_concurrent, 1);
  EXPECT_TRUE(core_->PollWork(n1, 0)->assignments.empty()) << "still at most one";
  auto trials = TrialsOf(alice, batch);
  ASSERT_EQ(trials.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(trials[i].trial, "t" + std::to_string(i)) << "in the file's order";
  ExpectBalanced();
}

TEST_F(ExperimentTest, DependenciesWaitAndEndWhenTheyCannotBeMet) {
  Caller alice = Funded("alice", 100 * kMicrosPerCredit);
  std::string n1 = AddNode("n1", 4);
  api::JobSpec spec = Spec(1);
  spec.max_runtime_s = 60;
  auto first = core_->SubmitJob(alice, spec, "");
  auto doomed = core_->SubmitJob(alice, spec, "");
  api::JobSpec after = spec;
  after.depends_on = {{"afterok", first->first.id}};
  auto ok_dep = core_->SubmitJob(alice, after, "");
  ASSERT_TRUE(ok_dep.ok());
  EXPECT_EQ(ok_dep->first.status, JobStatus::kQueued);
  EXPECT_NE(ok_dep->first.pending_reason.find("waiting for " + first->first.id), std::string::npos);
  after.depends_on = {{"afterok", doomed->first.id}};
  auto never = core_->SubmitJob(alice, after, "");
  after.depends_on = {{"afternotok", doomed->first.id}};
  auto cleanup = core_->SubmitJob(alice, after, "");
  StartAll(n1);
  Exit(n1, doomed->first.id, 1);
  ASSERT_TRUE(Eventually([&] { return Get(never->first.id).status == JobStatus::kCancelled; }));
  EXPECT_EQ(Get(never->first.id).reason, "dependency_never_satisfied");
  ASSERT_TRUE(Eventually([&] { return Get(cleanup->first.id).status == JobStatus::kStarting; }));
  EXPECT_EQ(Get(ok_dep->first.id).status, JobStatus::kQueued);
  Exit(n1, first->first.id, 0);
  ASSERT_TRUE(Eventually([&] { return Get(ok_dep->first.id).status == JobStatus::kStarting; }));
  // A dependency on something the caller cannot see is refused, naming it.
  Caller bob = Funded("bob", 10 * kMicrosPerCredit);
  api::JobSpec theirs = spec;
  theirs.depends_on = {{"afterok", first->first.id}};
  auto refused = core_->SubmitJob(bob, theirs, "");
  EXPECT_EQ(refused.status().field(), "depends_on[0].job");
}

TEST_F(ExperimentTest, DrainWithEvictionRequeuesWithoutUsingARetry) {
  Caller alice = Funded("alice", 100 * kMicrosPerCredit);
  std::string n1 = AddNode("n1", 1);
  api::JobSpec spec = Spec(1);
  spec.max_runtime_s = 60;
  spec.retry_times = 1;
  auto job = core_->SubmitJob(alice, spec, "");
  const std::string id = job->first.id;
  StartAll(n1);
  ASSERT_TRUE(core_->SetDraining(AdminCaller(), "n1", true, /*evict=*/true).ok());
  auto work = core_->PollWork(n1, 0);
  ASSERT_EQ(work->cancels.size(), 1u);
  EXPECT_EQ(work->cancels[0].reason, "node_draining");
  Exit(n1, id, 143, "node_draining");
  api::Job j = Get(id);
  EXPECT_EQ(j.status, JobStatus::kQueued);
  EXPECT_EQ(j.attempt, 2);
  EXPECT_EQ(j.retries, 0);
  EXPECT_EQ(j.reason, "node_draining");
  std::string n2 = AddNode("n2", 1);
  ASSERT_TRUE(Eventually([&] { return Get(id).node_id == n2; }));
}

TEST_F(ExperimentTest, CheckpointsAreRecordedForTheCurrentAttemptOnly) {
  Caller alice = Funded("alice", 100 * kMicrosPerCredit);
  std::string n1 = AddNode("n1", 1);
  api::JobSpec spec = Spec(1);
  spec.max_runtime_s = 60;
  spec.tier = "spot";
  auto job = core_->SubmitJob(alice, spec, "");
  const std::string id = job->first.id;
  StartAll(n1);
  ASSERT_TRUE(core_->RecordCheckpoint(n1, id, 1, 1234).ok());
  EXPECT_EQ(Get(id).checkpoint_attempt, 1);
  EXPECT_EQ(Get(id).checkpoint_bytes, 1234);
  EXPECT_EQ(core_->RecordCheckpoint(n1, id, 2, 1).code(), Code::kConflict);
  std::string n2 = AddNode("n2", 1);
  EXPECT_EQ(core_->RecordCheckpoint(n2, id, 1, 1).code(), Code::kConflict);
  Reboot();
  EXPECT_EQ(Get(id).checkpoint_bytes, 1234);
}

}  // namespace
}  // namespace tide::server
