// Scheduling through the real server: spot work preempted by on-demand work
// with the notice protocol, node labels and constraints, priorities, and
// the queue summary.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

using nlohmann::json;

class SchedulingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer();
    cluster_.StartAgent("eu1", "2xRTX4090:24GB", {"--label", "region=eu"});
    token_ = cluster_.NewUser("alice");
    client_ = cluster_.ClientFor(token_);
  }
  std::string Submit(const json& spec) { return SubmitOk(*client_, spec); }
  Cluster cluster_;
  std::string token_;
  std::unique_ptr<api::Client> client_;
};

TEST_F(SchedulingTest, SpotJobGetsTheNoticeYieldsAndResumes) {
  // The spot job traps the notice, says what it read, and exits; on its
  // second attempt it finishes at once.
  std::string spot = Submit(
      {{"name", "spot"},
       {"tier", "spot"},
       {"grace", "10s"},
       {"resources", {{"gpu_count", 2}}},
       {"command",
        "if [ \"$TIDE_ATTEMPT\" -gt 1 ]; then echo resumed attempt $TIDE_ATTEMPT; exit 0; fi; "
        "trap 'echo notice: $(cat \"$TIDE_NOTICE_FILE\" | tr \"\\n\" \" \"); exit 0' TERM; "
        "echo started; while true; do sleep 0.1; done"}});
  ASSERT_TRUE(Eventually([&] {
    auto j = client_->GetJob(spot);
    return j.ok() && j->status == api::JobStatus::kRunning;
  }));
  ASSERT_TRUE(Eventually([&] {
    auto logs = client_->GetLogs(spot, 1);
    return logs.ok() && logs->find("started") != std::string::npos;
  }));
  std::string urgent = Submit({{"name", "urgent"},
                               {"resources", {{"gpu_count", 2}}},
                               {"command", "echo on-demand ran; sleep 1"}});
  // The on-demand job cannot fit, so the spot job is told to stop.
  auto pending = client_->GetJob(urgent);
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ(pending->status, api::JobStatus::kQueued);
  EXPECT_NE(pending->pending_reason.find("preempt"), std::string::npos) << pending->pending_reason;

  api::Job done = WaitTerminal(*client_, urgent);
  EXPECT_EQ(done.status, api::JobStatus::kCompleted) << done.reason;
  api::Job resumed = WaitTerminal(*client_, spot);
  EXPECT_EQ(resumed.status, api::JobStatus::kCompleted) << resumed.reason;
  EXPECT_EQ(resumed.attempt, 2);
  ASSERT_EQ(resumed.attempts.size(), 2u);
  EXPECT_EQ(resumed.attempts[0].reason, "preempted");
  // It got the notice with the reason and a deadline before it stopped.
  auto first = client_->GetLogs(spot, 1);
  ASSERT_TRUE(first.ok());
  EXPECT_NE(first->find("notice: reason=preempted deadline="), std::string::npos) << *first;
  auto second = client_->GetLogs(spot, 2);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->find("resumed attempt 2"), std::string::npos) << *second;
  // The on-demand job started only after the spot job had stopped.
  EXPECT_GE(done.attempts[0].started_at, resumed.attempts[0].finished_at);
}

TEST_F(SchedulingTest, ConstraintsPriorityAndBadInput) {
  std::string us = Submit({{"name", "us"},
                           {"constraints", {{"region", "us"}}},
                           {"command", "true"}});
  auto j = client_->GetJob(us);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->status, api::JobStatus::kQueued);
  EXPECT_EQ(j->pending_reason, "no node with 1 GPU has labels region=us");
  std::string eu = Submit({{"name", "eu"},
                           {"constraints", {{"region", "eu"}}},
                           {"priority", 5},
                           {"max_price", 4.5},
                           {"command", "echo in eu"}});
  EXPECT_EQ(WaitTerminal(*client_, eu).status, api::JobStatus::kCompleted);
  auto nodes = cluster_.admin().ListNodes();
  ASSERT_TRUE(nodes.ok());
  EXPECT_EQ(nodes->at(0).labels.at("region"), "eu");

  // Bad input is refused whole, naming the field.
  struct Bad {
    json spec;
    std::string field;
  };
  std::vector<Bad> bad = {
      {{{"command", "true"}, {"tier", "gold"}}, "tier"},
      {{{"command", "true"}, {"priority", 5000}}, "priority"},
      {{{"command", "true"}, {"priority", "high"}}, "priority"},
      {{{"command", "true"}, {"constraints", {{"re gion", "eu"}}}}, "constraints.re gion"},
      {{{"command", "true"}, {"constraints", {{"region", 3}}}}, "constraints.region"},
      {{{"command", "true"}, {"max_price", -1}}, "max_price"},
  };
  for (auto& b : bad) {
    auto r = PostJobJson(*client_, b.spec);
    ASSERT_FALSE(r.ok()) << b.spec.dump();
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << b.spec.dump();
    EXPECT_NE(r.status().ToString().find(b.field), std::string::npos)
        << b.spec.dump() << " -> " << r.status().ToString();
  }
  // A bad label on the agent's command line is refused before it starts.
  auto agent = cluster_.Cli({"agent", "--label", "region"}, token_);
  EXPECT_NE(agent.exit_code, 0);
  EXPECT_NE(agent.err.find("KEY=VALUE"), std::string::npos) << agent.err;
}

TEST_F(SchedulingTest, DrainedNodeTakesNoNewJobs) {
  std::string admin = ReadAll(cluster_.dir() + "/server/admin.token");
  admin.erase(admin.find_last_not_of("\n") + 1);
  auto drain = cluster_.Cli({"admin", "node", "drain", "eu1"}, admin);
  ASSERT_EQ(drain.exit_code, 0) << drain.out << drain.err;
  EXPECT_NE(drain.out.find("is draining"), std::string::npos);
  std::string id = Submit({{"name", "later"}, {"command", "echo ran"}});
  auto j = client_->GetJob(id);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->status, api::JobStatus::kQueued);
  EXPECT_EQ(j->pending_reason, "every node is draining");
  EXPECT_NE(cluster_.Cli({"admin", "node", "drain", "nope"}, admin).exit_code, 0);
  EXPECT_NE(cluster_.Cli({"admin", "node", "drain", "eu1"}, token_).exit_code, 0);  // not an admin
  ASSERT_EQ(cluster_.Cli({"admin", "node", "undrain", "eu1"}, admin).exit_code, 0);
  EXPECT_EQ(WaitTerminal(*client_, id).status, api::JobStatus::kCompleted);
}

TEST_F(SchedulingTest, JobsArePlacedAgainstWhatTheHostOffers) {
  cluster_.StartAgent("small", "1xRTX4090:24GB", {"--cpus", "2", "--memory", "1GB"});
  auto nodes = client_->Call("GET", "/v1/nodes/small");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  EXPECT_EQ((*nodes)["cpus"], 2);
  EXPECT_EQ((*nodes)["memory_mb"], 1024);
  EXPECT_EQ((*nodes)["reliability"], 1.0);
  // More memory than "small" offers: it runs on eu1 (the whole host).
  std::string big = Submit({{"name", "big"},
                            {"resources", {{"memory", "2GB"}, {"gpu_count", 1}}},
                            {"command", "true"}});
  api::Job ran = WaitTerminal(*client_, big);
  EXPECT_EQ(ran.status, api::JobStatus::kCompleted) << ran.reason;
  EXPECT_NE(ran.node_id, (*nodes)["id"].get<std::string>());
  std::string many = Submit({{"name", "many-cpus"}, {"resources", {{"cpus", 4096}}}, {"command", "true"}});
  auto waiting = client_->GetJob(many);
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->status, api::JobStatus::kQueued);
  EXPECT_NE(waiting->pending_reason.find("room for 4096.0 CPUs"), std::string::npos)
      << waiting->pending_reason;
  ASSERT_TRUE(client_->Call("POST", "/v1/jobs/" + many + "/cancel").ok());
  // Bad values are refused naming the flag.
  CliResult bad = cluster_.Cli({"agent", "--memory", "lots", "--join-token", "x"}, "");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--memory"), std::string::npos) << bad.err;
  bad = cluster_.Cli({"agent", "--cpus", "-2", "--join-token", "x"}, "");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--cpus"), std::string::npos) << bad.err;
}

TEST_F(SchedulingTest, QueueShowsWaitsAndExpectedStarts) {
  std::string busy = Submit({{"name", "busy"},
                             {"max_runtime", "40s"},
                             {"resources", {{"gpu_count", 2}}},
                             {"command", "sleep 60"}});
  ASSERT_TRUE(Eventually([&] {
    auto j = client_->GetJob(busy);
    return j.ok() && j->status == api::JobStatus::kRunning;
  }));
  std::string next = Submit({{"name", "next"},
                             {"max_runtime", "10s"},
                             {"resources", {{"gpu_count", 2}, {"gpu_type", "RTX4090"}}},
                             {"command", "true"}});
  // The estimate follows from the running job's max_runtime.
  api::Job queued;
  ASSERT_TRUE(Eventually([&] {
    auto j = client_->GetJob(next);
    if (!j.ok() || j->expected_start == 0) return false;
    queued = *j;
    return true;
  }, std::chrono::seconds(15)));
  auto running = client_->GetJob(busy);
  ASSERT_TRUE(running.ok());
  EXPECT_NEAR(static_cast<double>(queued.expected_start),
              static_cast<double>(running->started_at + 40'000), 1500.0);
  auto q = cluster_.Cli({"queue", "-o", "json"}, token_);
  ASSERT_EQ(q.exit_code, 0) << q.err;
  json j = json::parse(q.out);
  EXPECT_EQ(j["total_gpus"], 2);
  EXPECT_EQ(j["free_gpus"], 0);
  bool saw_pending = false, saw_running = false;
  for (auto& g : j["by_gpu_type"]) {
    if (g["gpu_type"] == "RTX4090") {
      saw_pending = g["pending_jobs"] == 1 && g["pending_gpus"] == 2 && g["expected_wait_s"].is_number();
    }
    if (g["gpu_type"] == "any") saw_running = g["running_jobs"] == 1 && g["running_gpus"] == 2;
  }
  EXPECT_TRUE(saw_pending && saw_running) << q.out;
  ASSERT_EQ(j["jobs"].size(), 1u);
  EXPECT_EQ(j["jobs"][0]["id"], next);
  EXPECT_NE(j["jobs"][0]["pending_reason"].get<std::string>().find("waiting for 2 RTX4090 GPUs"),
            std::string::npos);
  // Another user sees the totals but not alice's jobs.
  std::string bob = cluster_.NewUser("bob");
  auto theirs = cluster_.Cli({"queue", "-o", "json"}, bob);
  ASSERT_EQ(theirs.exit_code, 0);
  EXPECT_TRUE(json::parse(theirs.out)["jobs"].empty());
  auto human = cluster_.Cli({"queue"}, token_);
  EXPECT_NE(human.out.find("EXPECTED START"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("0 of 2 GPUs free"), std::string::npos) << human.out;
  {
    std::istringstream lines(human.out);
    std::string line;
    bool shown = false;
    while (std::getline(lines, line)) {
      if (line.rfind("RTX4090", 0) == 0) shown = line.back() != '-';
    }
    EXPECT_TRUE(shown) << "the group's expected wait is shown: " << human.out;
  }
  auto status = cluster_.Cli({"status", next}, token_);
  EXPECT_NE(status.out.find("Expected start"), std::string::npos) << status.out;
  ASSERT_TRUE(client_->CancelJob(next).ok());
  ASSERT_TRUE(client_->CancelJob(busy).ok());
}

TEST(SimTest, ReplaysATraceAndRefusesBadInput) {
  std::string dir = MakeTempDir("tide-sim");
  std::ofstream(dir + "/t.csv") << "gpus,submit_time,duration,account\n1,0,100,a\n2,10,50,b\n8,20,10,a\n";
  std::ofstream(dir + "/bad.csv") << "submit_time,duration,gpus\n0,100,1\n5,ten,1\n";
  Cluster none;  // only for Cli(); no server is needed
  auto ok = none.Cli({"sim", "--trace", dir + "/t.csv", "--cluster", "1x8", "--policy", "fifo",
                      "-o", "json", "--per-job", dir + "/jobs.csv"},
                     "");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  json r = json::parse(ok.out);
  EXPECT_EQ(r["jobs"], 3);
  EXPECT_EQ(r["policy"], "fifo");
  for (const char* k : {"avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s",
                        "gpu_utilization"}) {
    EXPECT_TRUE(r[k].is_number()) << k;
  }
  EXPECT_EQ(r["makespan_s"], 110);  // the 8-GPU job waits for both others
  std::string per_job = ReadAll(dir + "/jobs.csv");
  EXPECT_EQ(per_job.rfind("id,account,gpus,submit_s,duration_s,start_s,finish_s,jct_s,queue_s,attempts,note\n", 0), 0u);
  EXPECT_NE(per_job.find("t3,a,8,20,10,100,110,90,80,1,"), std::string::npos) << per_job;
  auto table = none.Cli({"sim", "--trace", dir + "/t.csv", "--cluster", "1x8"}, "");
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_NE(table.out.find("policy            tide"), std::string::npos) << table.out;

  // A priced cluster: the small jobs take the cheap node, the 8-GPU job the
  // dear one; cost is GPU-seconds held x price.
  auto priced = none.Cli({"sim", "--trace", dir + "/t.csv", "--cluster", "1x8:RTX4090@0.4,1x8:A100@10",
                          "--policy", "fifo", "--placement", "pack-first", "-o", "json"},
                         "");
  ASSERT_EQ(priced.exit_code, 0) << priced.err;
  r = json::parse(priced.out);
  EXPECT_EQ(r["placement"], "pack-first");
  EXPECT_NEAR(r["cost_credits"].get<double>(), (100 * 0.4 + 2 * 50 * 0.4 + 8 * 10 * 10) / 3600, 1e-9);
  EXPECT_EQ(r["whole_node_jobs"], 1);
  EXPECT_TRUE(r["fragmentation"].is_number());
  table = none.Cli({"sim", "--trace", dir + "/t.csv", "--cluster", "1x8@0.4,1x8@10"}, "");
  EXPECT_NE(table.out.find("placement price-first"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("cost              0.24 credits"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("% of idle GPU-time on partly used nodes"), std::string::npos) << table.out;
  auto bad_price = none.Cli({"sim", "--trace", dir + "/t.csv", "--cluster", "1x8@cheap"}, "");
  EXPECT_NE(bad_price.exit_code, 0);
  EXPECT_NE(bad_price.err.find("bad price \"cheap\" in \"1x8@cheap\""), std::string::npos) << bad_price.err;
  auto bad_placement = none.Cli({"sim", "--trace", dir + "/t.csv", "--cluster", "1x8", "--placement", "spread"}, "");
  EXPECT_NE(bad_placement.exit_code, 0);
  EXPECT_NE(bad_placement.err.find("--placement"), std::string::npos) << bad_placement.err;

  auto bad_line = none.Cli({"sim", "--trace", dir + "/bad.csv", "--cluster", "1x8"}, "");
  EXPECT_NE(bad_line.exit_code, 0);
  EXPECT_NE(bad_line.err.find("bad.csv:3: duration \"ten\" is not a number of seconds"),
            std::string::npos) << bad_line.err;
  auto bad_policy = none.Cli({"sim", "--trace", dir + "/t.csv", "--cluster", "1x8", "--policy", "lifo"}, "");
  EXPECT_NE(bad_policy.exit_code, 0);
  EXPECT_NE(bad_policy.err.find("unknown policy \"lifo\""), std::string::npos) << bad_policy.err;
  auto bad_cluster = none.Cli({"sim", "--trace", dir + "/t.csv", "--cluster", "8xx"}, "");
  EXPECT_NE(bad_cluster.exit_code, 0);
  EXPECT_NE(bad_cluster.err.find("--cluster"), std::string::npos) << bad_cluster.err;
  auto bad_factor = none.Cli({"sim", "--trace", dir + "/t.csv", "--cluster", "1x8",
                              "--walltime-factor", "0.5"}, "");
  EXPECT_NE(bad_factor.exit_code, 0);
  auto no_dates = none.Cli({"sim", "--trace", dir + "/t.csv", "--cluster", "1x8", "--since", "2017-10-01"}, "");
  EXPECT_NE(no_dates.exit_code, 0);
  EXPECT_NE(no_dates.err.find("no dates"), std::string::npos) << no_dates.err;
  auto missing = none.Cli({"sim", "--trace", dir + "/nope.csv", "--cluster", "1x8"}, "");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("cannot read trace"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace tide::e2e
