// Experiments through the real server, agents and CLI: checkpoints that
// follow a job to another node, metrics, retries, logs of every attempt,
// and batches with a concurrency cap.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/archive.h"
#include "common/paths.h"
#include "common/token.h"
#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

using nlohmann::json;

// Counts to STEPS, one step per 0.1 s, resuming from the checkpoint; saves
// it atomically after every step and on SIGTERM exits at once; one metric
// line per step.
constexpr const char* kCounter = R"PY(python3 -c '
import json, os, signal, sys, time
STEPS = int(os.environ.get("STEPS", "40"))
ckpt = os.path.join(os.environ["TIDE_CHECKPOINT_DIR"], "state.json")
step = 0
if os.path.exists(ckpt):
    step = json.load(open(ckpt))["step"]
print("attempt", os.environ["TIDE_ATTEMPT"], "resumed", os.environ.get("TIDE_RESUMED", "0"),
      "from step", step, flush=True)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
metrics = open(os.environ["TIDE_METRICS_FILE"], "a")
while step < STEPS:
    time.sleep(0.1)
    step += 1
    tmp = ckpt + ".tmp"
    json.dump({"step": step}, open(tmp, "w"))
    os.replace(tmp, ckpt)
    metrics.write(json.dumps({"step": step, "loss": 10.0 / step}) + "\n")
    metrics.flush()
print("done at step", step, flush=True)
open(os.path.join(os.environ["TIDE_OUTPUT_DIR"], "steps"), "w").write(str(step))
')PY";

class ExperimentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer();
    cluster_.StartAgent("a", "1xRTX4090:24GB", {"--checkpoint-interval", "1s"});
    cluster_.StartAgent("b", "1xRTX4090:24GB", {"--checkpoint-interval", "1s"});
    token_ = cluster_.NewUser("alice");
    client_ = cluster_.ClientFor(token_);
  }
  std::string AdminToken() {
    std::string t = ReadAll(cluster_.dir() + "/server/admin.token");
    t.erase(t.find_last_not_of("\n") + 1);
    return t;
  }
  std::string NodeName(const std::string& node_id) {
    auto nodes = cluster_.admin().ListNodes();
    if (!nodes.ok()) return "";
    for (auto& n : *nodes) {
      if (n.id == node_id) return n.name;
    }
    return "";
  }
  // Waits until the job's metrics reach `step`.
  bool ReachesStep(const std::string& id, int step) {
    return Eventually([&] {
      auto m = client_->Call("GET", "/v1/jobs/" + id + "/metrics?last=true");
      return m.ok() && (*m)["last"].value("step", 0) >= step;
    });
  }
  Cluster cluster_;
  std::string token_;
  std::unique_ptr<api::Client> client_;
};

std::vector<int> Steps(const json& metrics) {
  std::vector<int> out;
  for (const auto& m : metrics) out.push_back(m["step"].get<int>());
  return out;
}

TEST_F(ExperimentsTest, AnEvictedJobResumesFromItsCheckpointOnTheOtherAgent) {
  // No periodic upload in this attempt: what it resumes from is the upload
  // after the notice.
  std::string id = SubmitOk(*client_, {{"command", kCounter},
                                       {"grace", "10s"},
                                       {"checkpoint_interval", "1h"},
                                       {"retry_times", 2}});
  api::Job running;
  ASSERT_TRUE(Eventually([&] {
    running = *client_->GetJob(id);
    return running.status == api::JobStatus::kRunning;
  }));
  ASSERT_TRUE(ReachesStep(id, 8));
  const std::string first = NodeName(running.node_id);
  CliResult drain = cluster_.Cli({"admin", "node", "drain", first, "--evict"}, AdminToken());
  ASSERT_EQ(drain.exit_code, 0) << drain.err;
  EXPECT_NE(drain.out.find("node_draining"), std::string::npos) << drain.out;

  api::Job done = WaitTerminal(*client_, id, std::chrono::seconds(90));
  ASSERT_EQ(done.status, api::JobStatus::kCompleted) << done.reason;
  ASSERT_EQ(done.attempts.size(), 2u);
  EXPECT_EQ(done.attempts[0].reason, "node_draining");
  EXPECT_NE(done.attempts[1].node_id, done.attempts[0].node_id);
  EXPECT_EQ(done.retries, 0);
  EXPECT_EQ(done.checkpoint_attempt, 1) << "the upload after the notice; none on completion";

  // The second attempt went on from where the first stopped: every step
  // once, the loss continuing.
  auto metrics = client_->Call("GET", "/v1/jobs/" + id + "/metrics");
  ASSERT_TRUE(metrics.ok());
  std::vector<int> steps = Steps((*metrics)["metrics"]);
  std::vector<int> want(40);
  for (int i = 0; i < 40; ++i) want[i] = i + 1;
  EXPECT_EQ(steps, want);
  int second_from = 0;
  for (const auto& m : (*metrics)["metrics"]) {
    if (m["attempt"] == 2) {
      second_from = m["step"].get<int>();
      break;
    }
  }
  EXPECT_GE(second_from, 9);
  auto log2 = client_->GetLogs(id, 2);
  ASSERT_TRUE(log2.ok());
  EXPECT_NE(log2->find("attempt 2 resumed 1 from step " + std::to_string(second_from - 1)),
            std::string::npos)
      << *log2;
  EXPECT_EQ(*client_->GetOutput(id, "steps"), "40");

  // The first attempt's log is still there after its agent is gone, and
  // `tide logs` marks where each attempt starts.
  cluster_.agent(first).Signal(SIGKILL);
  cluster_.agent(first).Wait(std::chrono::seconds(5));
  CliResult one = cluster_.Cli({"logs", id, "--attempt", "1"}, token_);
  EXPECT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("attempt 1 resumed 0 from step 0"), std::string::npos) << one.out;
  CliResult all = cluster_.Cli({"logs", id}, token_);
  EXPECT_NE(all.out.find("--- attempt 2"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("attempt 1 resumed 0"), std::string::npos) << all.out;
  CliResult m = cluster_.Cli({"metrics", id, "--last"}, token_);
  EXPECT_EQ(m.exit_code, 0) << m.err;
  EXPECT_NE(m.out.find("step"), std::string::npos) << m.out;
}

TEST_F(ExperimentsTest, AKilledAgentsJobResumesFromAPeriodicCheckpoint) {
  std::string id =
      SubmitOk(*client_, {{"command", kCounter}, {"env", {{"STEPS", "60"}}}, {"retry_times", 2}});
  api::Job running;
  ASSERT_TRUE(Eventually([&] {
    running = *client_->GetJob(id);
    return running.status == api::JobStatus::kRunning;
  }));
  ASSERT_TRUE(ReachesStep(id, 20));
  ASSERT_TRUE(Eventually([&] { return client_->GetJob(id)->checkpoint_attempt == 1; }));
  const std::string first = NodeName(running.node_id);
  cluster_.agent(first).Signal(SIGKILL);
  api::Job done = WaitTerminal(*client_, id, std::chrono::seconds(90));
  ASSERT_EQ(done.status, api::JobStatus::kCompleted) << done.reason;
  EXPECT_EQ(done.attempts[0].reason, "node_lost");
  EXPECT_EQ(done.retries, 0) << "a lost node uses no retry";
  auto log2 = client_->GetLogs(id, 2);
  ASSERT_TRUE(log2.ok());
  EXPECT_NE(log2->find("restored the checkpoint of attempt 1"), std::string::npos) << *log2;
  EXPECT_EQ(log2->find("from step 0"), std::string::npos) << *log2;
  EXPECT_EQ(*client_->GetOutput(id, "steps"), "60");
}

TEST_F(ExperimentsTest, ACheckpointCutOffOnTheWayIsRefusedAndNeverRestored) {
  std::string id = SubmitOk(*client_, {{"command", kCounter}, {"env", {{"STEPS", "30"}}}});
  api::Job running;
  ASSERT_TRUE(Eventually([&] {
    running = *client_->GetJob(id);
    return running.status == api::JobStatus::kRunning && running.checkpoint_attempt == 1;
  }));
  const std::string first = NodeName(running.node_id);
  std::string token = ReadAll(cluster_.dir() + "/agent-" + first + "/node.token");
  token.erase(token.find_last_not_of("\n") + 1);
  auto node = api::Client::Create(cluster_.url(), token);
  ASSERT_TRUE(node.ok());
  // A state far ahead, cut off halfway: the digest of the whole archive,
  // half its bytes.
  std::string dir = MakeTempDir("tide-ckpt");
  std::ofstream(dir + "/state.json") << R"({"step": 25})";
  auto archive = PackDirectory(dir);
  ASSERT_TRUE(archive.ok());
  std::string digest = Sha256Hex(*archive);
  Status cut = (*node)->PutCheckpoint(id, 1, archive->substr(0, archive->size() / 2), digest);
  EXPECT_EQ(cut.code(), Code::kInvalidArgument) << cut.ToString();
  EXPECT_EQ(cut.field(), "X-Tide-Sha256");
  std::string junk = "not an archive";
  Status bad = (*node)->PutCheckpoint(id, 1, junk, Sha256Hex(junk));
  EXPECT_EQ(bad.code(), Code::kInvalidArgument) << bad.ToString();
  // A stale attempt may not write at all.
  EXPECT_EQ((*node)->PutCheckpoint(id, 7, *archive, digest).code(), Code::kConflict);

  CliResult drain = cluster_.Cli({"admin", "node", "drain", first, "--evict"}, AdminToken());
  ASSERT_EQ(drain.exit_code, 0) << drain.err;
  api::Job done = WaitTerminal(*client_, id, std::chrono::seconds(90));
  ASSERT_EQ(done.status, api::JobStatus::kCompleted);
  auto log2 = client_->GetLogs(id, 2);
  EXPECT_EQ(log2->find("from step 25"), std::string::npos) << *log2;
  auto metrics = client_->Call("GET", "/v1/jobs/" + id + "/metrics");
  std::vector<int> steps = Steps((*metrics)["metrics"]);
  EXPECT_EQ(steps.size(), 30u) << "every step exactly once";
}

TEST_F(ExperimentsTest, AFailedAttemptIsRetriedWithTheResumedVariables) {
  std::string id = SubmitOk(
      *client_, {{"command", "echo attempt=$TIDE_ATTEMPT resumed=${TIDE_RESUMED:-0} "
                             "why=${TIDE_RESTART_REASON:-none}; [ $TIDE_ATTEMPT -ge 2 ] || exit 3"},
                 {"retry_times", 2}});
  api::Job done = WaitTerminal(*client_, id);
  ASSERT_EQ(done.status, api::JobStatus::kCompleted) << done.reason;
  EXPECT_EQ(done.retries, 1);
  EXPECT_EQ(done.attempts[0].reason, "exit_code:3");
  EXPECT_NE(client_->GetLogs(id, 2)->find("attempt=2 resumed=1 why=exit_code:3"), std::string::npos);
  CliResult status = cluster_.Cli({"status", id}, token_);
  EXPECT_NE(status.out.find("exit_code:3"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("Retries       1 of 2"), std::string::npos) << status.out;
}

TEST_F(ExperimentsTest, ABatchRunsWithinItsConcurrencyAndReportsResults) {
  std::string file = cluster_.dir() + "/sweep.yaml";
  std::ofstream(file) << R"(experiment_batch: sweep-1
max_concurrent: 1
retry_times: 1
template:
  command: >-
    echo lr={lr} param=$TIDE_PARAM_LR trial=$TIDE_TRIAL;
    echo "{\"step\": 1, \"loss\": {lr}}" >> $TIDE_METRICS_FILE;
    sleep 0.3;
    [ "$TIDE_TRIAL" != flaky ] || [ "$TIDE_ATTEMPT" -ge 2 ] || exit 4
  max_runtime: 5m
jobs:
  - {id: flaky, lr: 0.5}
grid:
  lr: [0.1, 0.2]
)";
  CliResult submitted = cluster_.Cli({"batch", "submit", file, "-o", "json"}, token_);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string batch = json::parse(submitted.out)["id"];
  ASSERT_TRUE(Eventually([&] {
    auto b = client_->Call("GET", "/v1/batches/" + batch);
    return b.ok() && (*b)["status"] == "completed";
  }, std::chrono::seconds(60)));
  CliResult results = cluster_.Cli({"batch", "results", batch, "-o", "json"}, token_);
  ASSERT_EQ(results.exit_code, 0) << results.err;
  json r = json::parse(results.out);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0]["id"], "flaky");
  EXPECT_EQ(r[0]["attempts"], 2);
  EXPECT_EQ(r[0]["params"]["lr"], "0.5");
  EXPECT_EQ(r[0]["metrics"]["loss"], 0.5);
  EXPECT_EQ(r[1]["id"], "grid-1");
  EXPECT_EQ(r[2]["metrics"]["loss"], 0.2);
  for (const auto& t : r) EXPECT_EQ(t["status"], "completed");
  // Never two at once: every attempt ended before the next began.
  auto page = client_->Call("GET", "/v1/jobs?batch=" + batch);
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& j : (*page)["jobs"]) {
    for (const auto& a : j["attempts"]) spans.emplace_back(a["started_at"], a["finished_at"]);
  }
  ASSERT_EQ(spans.size(), 4u);
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first);
  CliResult csv = cluster_.Cli({"batch", "results", batch, "-o", "csv"}, token_);
  EXPECT_EQ(csv.out.rfind("trial,lr,status,attempts,cost,loss,step\n", 0), 0u) << csv.out;
  CliResult table = cluster_.Cli({"batch", "status", batch}, token_);
  EXPECT_NE(table.out.find("3 completed"), std::string::npos) << table.out;
}

TEST_F(ExperimentsTest, ABadBatchFileIsRefusedWithItsLineAndNothingIsSubmitted) {
  std::string file = cluster_.dir() + "/bad.yaml";
  std::ofstream(file) << "template:\n  command: echo {lr}\n  resources:\n    gpu_count: 0\njobs:\n  - {lr: 1}\n";
  CliResult r = cluster_.Cli({"batch", "submit", file}, token_);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("bad.yaml:4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gpu_count"), std::string::npos) << r.err;
  auto list = client_->Call("GET", "/v1/batches");
  EXPECT_TRUE((*list)["batches"].empty());
  // The server refuses it the same way.
  auto direct = client_->Call("POST", "/v1/batches",
                              json{{"template", {{"command", "x"}}}, {"jobs", "nope"}});
  EXPECT_EQ(direct.status().field(), "jobs");
}

}  // namespace
}  // namespace tide::e2e

namespace tide::e2e {
namespace {

TEST_F(ExperimentsTest, ASlurmScriptRunsUnchanged) {
  const std::string submit_dir = cluster_.dir() + "/submit";
  std::filesystem::create_directories(submit_dir);
  std::string script = submit_dir + "/train.sh";
  std::ofstream(script) << R"(#!/bin/bash
#SBATCH --job-name=slurmish
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task 2
#SBATCH --time=00:05:00
#SBATCH --output=logs/%x-%j.out
#SBATCH --mail-type=END
echo "job=$SLURM_JOB_ID name=$SLURM_JOB_NAME gpus=$SLURM_GPUS_ON_NODE cpus=$SLURM_CPUS_PER_TASK nnodes=$SLURM_NNODES procid=$SLURM_PROCID task=${SLURM_ARRAY_TASK_ID:-none} args=$*"
test "$PWD" = "$SLURM_SUBMIT_DIR"
)";
  CliResult r = cluster_.Cli({"sbatch", script, "one", "two"}, token_, submit_dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(r.out.rfind("Submitted batch job ", 0), 0u) << r.out;
  EXPECT_NE(r.err.find("train.sh:7: --mail-type"), std::string::npos) << r.err;
  std::string id = r.out.substr(20);
  id.erase(id.find_last_not_of("\n") + 1);
  api::Job done = WaitTerminal(*client_, id);
  ASSERT_EQ(done.status, api::JobStatus::kCompleted) << done.reason << *client_->GetLogs(id);
  const std::string line = "job=" + id + " name=slurmish gpus=1 cpus=2 nnodes=1 procid=0 task=none args=one two";
  EXPECT_NE(client_->GetLogs(id)->find(line), std::string::npos) << *client_->GetLogs(id);
  auto out = client_->GetOutput(id, "logs/slurmish-" + id + ".out");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_NE(out->find(line), std::string::npos);

  // An array with a cap, and --parsable.
  CliResult arr = cluster_.Cli({"sbatch", "--parsable", "--array=0-3%1", script}, token_, submit_dir);
  ASSERT_EQ(arr.exit_code, 0) << arr.err;
  std::string batch = arr.out.substr(0, arr.out.find('\n'));
  EXPECT_EQ(batch.rfind("b-", 0), 0u) << arr.out;
  ASSERT_TRUE(Eventually([&] {
    auto b = client_->Call("GET", "/v1/batches/" + batch);
    return b.ok() && (*b)["status"] == "completed";
  }, std::chrono::seconds(60)));
  auto page = client_->Call("GET", "/v1/jobs?batch=" + batch);
  std::set<std::string> tasks;
  for (const auto& j : (*page)["jobs"]) {
    std::string log = *client_->GetLogs(j["id"]);
    size_t at = log.find("task=");
    if (at != std::string::npos) tasks.insert(log.substr(at + 5, 1));
  }
  EXPECT_EQ(tasks, (std::set<std::string>{"0", "1", "2", "3"}));

  CliResult bad = cluster_.Cli({"sbatch", "--nodelist=n1", script}, token_, submit_dir);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--nodelist"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace tide::e2e
