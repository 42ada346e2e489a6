// The store's records: a round trip keeps every field; old, odd or newer
// records are read as far as they can be, never with the client's strict
// validator; and a store written by an earlier server (testdata/) opens
// and recovers.
#include "server/records.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/clock.h"
#include "server/core.h"
#include "store/store.h"

namespace tide::server {
namespace {

using nlohmann::json;

api::Job FullJob() {
  api::Job job;
  job.id = "j-1";
  job.owner = "u-1";
  job.spec.name = "train";
  job.spec.command = {"python3", "train.py"};
  job.spec.env = {{"A", "1"}};
  job.spec.resources.nodes = 2;
  job.spec.resources.gpu_count = 4;
  job.spec.resources.gpu_types = {"A100", "H100"};
  job.spec.resources.gpu_memory_mb = 40'960;
  job.spec.resources.cpus = 7.5;
  job.spec.resources.memory_mb = 65'536;
  job.spec.max_runtime_s = 3600;
  job.spec.grace_s = 12;
  job.spec.code = "c-1";
  job.spec.tags = {"x", "batch:b-1"};
  job.spec.tier = "spot";
  job.spec.priority = 7;
  job.spec.constraints = {{"region", "eu"}};
  job.spec.max_price = 1'500'000;
  job.spec.max_cost = 25'000'000;
  job.spec.retry_times = 2;
  job.spec.checkpoint_interval_s = 300;
  job.spec.slurm = true;
  job.spec.network = true;
  job.spec.depends_on = {{"afterany", "j-0"}};
  job.status = api::JobStatus::kRunning;
  job.reason = "preempted";
  job.exit_code = 3;
  job.attempt = 2;
  job.node_id = "n-1";
  job.gpus = {0, 1, 2, 3};
  job.created_at = 1;
  job.started_at = 2;
  job.cancel_requested = true;
  job.cancel_reason = "budget_exceeded";
  job.preempt_requested = true;
  job.gang_failure = "exit_code:1";
  job.requeue_reason = "node_draining";
  api::Attempt a;
  a.attempt = 2;
  a.node_id = "n-1";
  a.gpus = {0, 1, 2, 3};
  a.rate = 10;
  a.started_at = 2;
  a.ranks = {{"n-1", {0, 1, 2, 3}, 10, 2, 0, "", std::nullopt}, {"n-2", {0, 1, 2, 3}, 11, 3, 4, "oom", 137}};
  a.master_addr = "10.0.0.1";
  a.master_port = 29501;
  job.attempts = {a};
  job.retries = 1;
  job.batch = "b-1";
  job.trial = "t-1";
  job.params = {{"lr", "0.1"}};
  job.checkpoint_attempt = 1;
  job.checkpoint_bytes = 100;
  job.checkpoint_at = 5;
  return job;
}

TEST(JobRecord, RoundTripKeepsEveryField) {
  api::Job job = FullJob();
  auto back = JobRecordFromDoc(JobRecordDoc(job));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(api::ToJson(*back).dump(), api::ToJson(job).dump());
  EXPECT_EQ(json::parse(JobRecordDoc(job))["record_version"], kRecordVersion);
}

TEST(JobRecord, ReadsWhatAClientWouldBeRefusedFor) {
  // Values today's validator refuses (a priority out of range, no command,
  // an unknown tier, an unknown field, a field of the wrong type) must not
  // stop a recovery: the record is the server's own.
  json j = json::parse(JobRecordDoc(FullJob()));
  j["priority"] = 5000;
  j["command"] = json::array();
  j["tier"] = "platinum";
  j["a_field_of_the_future"] = {{"x", 1}};
  j["retries"] = "two";
  j.erase("record_version");  // as servers before versions wrote it
  auto job = JobRecordFromDoc(j.dump());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.priority, 5000);
  EXPECT_TRUE(job->spec.command.empty());
  EXPECT_EQ(job->spec.tier, "platinum");
  EXPECT_EQ(job->retries, 0);
  EXPECT_EQ(job->attempts.size(), 1u);
}

TEST(JobRecord, OldNamesAndMissingFieldsTakeTheirDefaults) {
  auto job = JobRecordFromDoc(R"({"id":"j-2","status":"queued","gang_requeue":"node_lost"})");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->requeue_reason, "node_lost");
  EXPECT_EQ(job->attempt, 1);
  EXPECT_EQ(job->spec.grace_s, 30);
  EXPECT_EQ(job->spec.image, "host");
  EXPECT_EQ(job->spec.resources.gpu_count, 1);
}

TEST(JobRecord, RefusesWhatItCannotReadSayingWhy) {
  EXPECT_FALSE(JobRecordFromDoc("not json").ok());
  auto newer = JobRecordFromDoc(R"({"id":"j-3","status":"queued","record_version":99})");
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.status().message().find("newer"), std::string::npos);
  auto status = JobRecordFromDoc(R"({"id":"j-3","status":"sleeping"})");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.status().field(), "status");
}

TEST(NodeRecord, KeepsItsHistoryAndNotItsTelemetry) {
  api::Node n;
  n.id = "n-1";
  n.name = "rig";
  n.cpus = 32;
  n.memory_mb = 128'000;
  api::Gpu g;
  g.index = 0;
  g.name = "NVIDIA GeForce RTX 4090";
  g.model = "RTX4090";
  g.memory_mb = 24'576;
  g.utilization_pct = 99;
  n.gpus = {g};
  auto back = NodeRecordFromDoc(NodeRecordDoc(n, {10, 3}));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->node.name, "rig");
  EXPECT_EQ(back->node.cpus, 32);
  EXPECT_EQ(back->node.memory_mb, 128'000);
  ASSERT_EQ(back->node.gpus.size(), 1u);
  EXPECT_EQ(back->node.gpus[0].utilization_pct, -1);
  EXPECT_EQ(back->history.ended, 10);
  EXPECT_EQ(back->history.bad, 3);
}

// testdata/store-v3 was written by a real server, agents and the command
// line (tests/e2e/store_fixture_writer_test.cc) before records had
// versions. Every later server must open it.
TEST(StoreFixture, AStoreWrittenByAnEarlierServerRecovers) {
  namespace fs = std::filesystem;
  const fs::path from = fs::path(TIDE_SOURCE_DIR) / "server/testdata/store-v3";
  ASSERT_TRUE(fs::exists(from / "tide.db")) << from;
  const fs::path dir = fs::temp_directory_path() / ("tide-fixture-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& f : fs::directory_iterator(from)) fs::copy_file(f.path(), dir / f.path().filename());
  {
    auto store = store::OpenSqliteStore((dir / "tide.db").string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    FakeClock clock(1'900'000'000'000);
    Core core(store->get(), &clock, CoreOptions{});
    Status st = core.Recover();
    ASSERT_TRUE(st.ok()) << st.ToString();
    ledger::Totals totals;
    ASSERT_TRUE(core.CheckLedger(&totals).ok());
    EXPECT_GT(totals.issued, 0);
    auto alice = core.FindUser("alice");
    ASSERT_TRUE(alice.ok());
    Caller a{Scope::kUser, *alice};
    // Tokens of version 3 had no name, scope or expiry: each user's is its
    // main token, of full scope, and never expires.
    auto tokens = core.ListTokens(a);
    ASSERT_EQ(tokens.size(), 1u);
    EXPECT_EQ(tokens[0].name, "main");
    EXPECT_EQ(tokens[0].scope, "full");
    EXPECT_EQ(tokens[0].expires_at, 0);
    EXPECT_FALSE(core.ListJoinTokens().empty());
    auto [jobs, next] = core.ListJobs(a, "", "", 1000, "");
    std::map<std::string, api::Job> by_name;
    for (const auto& j : jobs) by_name[j.spec.name] = j;
    EXPECT_EQ(by_name["done"].status, api::JobStatus::kCompleted);
    EXPECT_EQ(by_name["failed"].status, api::JobStatus::kFailed);
    EXPECT_EQ(by_name["failed"].attempts.size(), 2u) << "one retry";
    EXPECT_EQ(by_name["cancelled"].status, api::JobStatus::kCancelled);
    EXPECT_EQ(by_name["waiting"].status, api::JobStatus::kQueued);
    EXPECT_EQ(by_name["after"].spec.depends_on.size(), 1u);
    EXPECT_EQ(by_name["checkpointing"].status, api::JobStatus::kRunning);
    EXPECT_EQ(by_name["checkpointing"].checkpoint_attempt, 1);
    EXPECT_EQ(by_name["gang"].status, api::JobStatus::kRunning);
    EXPECT_EQ(by_name["gang"].attempts.back().ranks.size(), 2u);
    EXPECT_EQ(by_name["spot"].spec.tier, "spot");
    auto batches = core.ListBatches(a);
    ASSERT_EQ(batches.size(), 1u);
    EXPECT_EQ(batches[0].status, "completed");
    EXPECT_EQ(batches[0].counts["completed"], 3);
    EXPECT_EQ(core.ListNodes().size(), 2u);
    EXPECT_GT(core.DailyCap(*alice), 0);
    EXPECT_EQ(core.Weight(*alice), 2.0);
    // It runs on: a new job is admitted against the recovered balance.
    core.Start();
    api::JobSpec spec;
    spec.name = "after-upgrade";
    spec.command = {"true"};
    spec.max_runtime_s = 60;
    auto job = core.SubmitJob(a, spec, "");
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    // The same idempotency key answers with the job it made then.
    auto keyed = core.SubmitJob(a, spec, "fixture-key-1");
    ASSERT_TRUE(keyed.ok());
    EXPECT_FALSE(keyed->second);
    EXPECT_EQ(keyed->first.spec.name, "keyed");
    core.Stop();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tide::server
