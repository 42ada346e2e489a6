// The life of a job through real processes: submit, logs while running,
// outputs, GPUs, cancel, timeouts.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

using nlohmann::json;

class JobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer();
    cluster_.StartAgent("a1", "4xRTX4090:24GB");
    cluster_.StartAgent("a2", "2xA100:80GB");
    token_ = cluster_.NewUser("alice");
    client_ = cluster_.ClientFor(token_);
  }
  std::string Submit(const json& spec) { return SubmitOk(*client_, spec); }
  Cluster cluster_;
  std::string token_;
  std::unique_ptr<api::Client> client_;
};

TEST_F(JobsTest, SubmitFollowLogsAndDownloadOutputs) {
  // A code directory with a data file the job copies to its outputs.
  std::string code = MakeTempDir("tide-code");
  std::string data(200 * 1024, '\0');
  std::mt19937 rng(7);
  for (auto& c : data) c = static_cast<char>(rng());
  std::ofstream(code + "/data.bin", std::ios::binary) << data;
  std::ofstream(code + "/run.sh") << "for i in 1 2 3 4 5; do echo \"line $i\"; sleep 0.4; done\n"
                                     "mkdir -p \"$TIDE_OUTPUT_DIR/sub\"\n"
                                     "cp data.bin \"$TIDE_OUTPUT_DIR/sub/data.bin\"\n"
                                     "echo finished >&2\n";
  auto sub = cluster_.Cli({"submit", "--name", "hello", "--gpus", "1", "--gpu-type", "RTX4090",
                           "--code", code, "-o", "json", "--", "sh", "run.sh"},
                          token_);
  ASSERT_EQ(sub.exit_code, 0) << sub.out << sub.err;
  std::string id = json::parse(sub.out)["id"];

  std::string follow_out = cluster_.dir() + "/follow.out";
  auto follower = cluster_.CliBackground({"logs", "-f", id}, token_, follow_out);
  // The first line arrives while the job is still running.
  ASSERT_TRUE(Eventually([&] { return ReadAll(follow_out).find("line 1") != std::string::npos; }));
  auto during = client_->GetJob(id);
  EXPECT_EQ(during->status, api::JobStatus::kRunning) << "logs must stream while the job runs";
  EXPECT_EQ(ReadAll(follow_out).find("line 5"), std::string::npos);

  auto wait = cluster_.Cli({"wait", id}, token_);
  EXPECT_EQ(wait.exit_code, 0) << wait.out << wait.err;
  EXPECT_EQ(follower->Wait(std::chrono::seconds(20)), 0) << "logs -f ends with the job";
  std::string logs = ReadAll(follow_out);
  for (int i = 1; i <= 5; ++i) EXPECT_NE(logs.find("line " + std::to_string(i)), std::string::npos);
  EXPECT_NE(logs.find("finished"), std::string::npos) << "stderr is in the log too";

  auto job = client_->GetJob(id);
  EXPECT_EQ(job->status, api::JobStatus::kCompleted);
  EXPECT_EQ(job->exit_code, 0);
  std::string out_dir = cluster_.dir() + "/downloaded";
  auto get = cluster_.Cli({"outputs", id, "--get", out_dir}, token_);
  ASSERT_EQ(get.exit_code, 0) << get.out << get.err;
  EXPECT_EQ(ReadAll(out_dir + "/sub/data.bin"), data) << "outputs download byte-identical";
  std::filesystem::remove_all(code);
}

TEST_F(JobsTest, TwoGpuJobGetsTwoDistinctGpus) {
  std::string id = Submit({{"name", "two"},
                           {"image", "host"},
                           {"command", {"sh", "-c", "echo CVD=$CUDA_VISIBLE_DEVICES"}},
                           {"resources", {{"gpu_type", "A100"}, {"gpu_count", 2}}}});
  auto job = WaitTerminal(*client_, id);
  ASSERT_EQ(job.status, api::JobStatus::kCompleted) << job.reason;
  EXPECT_EQ(job.gpus.size(), 2u);
  EXPECT_NE(job.gpus[0], job.gpus[1]);
  std::string log = *client_->GetLogs(id);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("CVD=(\\d+),(\\d+)"))) << log;
  EXPECT_NE(m[1].str(), m[2].str());
  EXPECT_EQ(std::stoi(m[1].str()), job.gpus[0]);
  EXPECT_EQ(std::stoi(m[2].str()), job.gpus[1]);
}

TEST_F(JobsTest, CancelKillsTheWholeProcessTree) {
  std::string id = Submit(
      {{"command",
        {"sh", "-c",
         "sleep 1000 & echo child=$!; setsid sleep 1000 & echo detached=$!; "
         "(sh -c 'sleep 1000 & echo grandchild=$!; wait') & sleep 1000"}},
       {"resources", {{"gpu_count", 1}}},
       {"grace", "1s"}});
  std::string log;
  ASSERT_TRUE(Eventually([&] {
    log = *client_->GetLogs(id);
    return log.find("grandchild=") != std::string::npos && log.find("detached=") != std::string::npos;
  })) << log;
  std::vector<pid_t> pids;
  std::regex re("(child|detached|grandchild)=(\\d+)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it) {
    pids.push_back(std::stoi((*it)[2].str()));
  }
  ASSERT_EQ(pids.size(), 3u) << log;
  // Those are the pids the job sees; in a sandbox they are another pid
  // namespace's. The host's are found by the job's tag.
  pids = JobProcesses(id);
  ASSERT_GE(pids.size(), 4u) << log;  // the shell, its three sleepers (and bwrap's)
  for (pid_t p : pids) EXPECT_FALSE(ProcessGone(p));

  auto cancel = cluster_.Cli({"cancel", id}, token_);
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  auto job = WaitTerminal(*client_, id);
  EXPECT_EQ(job.status, api::JobStatus::kCancelled);
  EXPECT_EQ(job.reason, "cancelled");
  for (pid_t p : pids) {
    EXPECT_TRUE(Eventually([&] { return ProcessGone(p); }, std::chrono::seconds(10)))
        << "pid " << p << " survived the cancel";
  }
}

TEST_F(JobsTest, MaxRuntimeEndsASleeperWithTimeout) {
  std::string id = Submit({{"command", {"sleep", "600"}},
                           {"resources", {{"gpu_count", 1}}},
                           {"max_runtime", "2s"},
                           {"grace", "1s"}});
  auto job = WaitTerminal(*client_, id, std::chrono::seconds(30));
  EXPECT_EQ(job.status, api::JobStatus::kFailed);
  EXPECT_EQ(job.reason, "timeout");
}

TEST_F(JobsTest, UnsatisfiableJobSaysWhy) {
  std::string id = Submit({{"command", {"true"}}, {"resources", {{"gpu_type", "H100"}}}});
  auto job = client_->GetJob(id);
  EXPECT_EQ(job->status, api::JobStatus::kQueued);
  EXPECT_EQ(job->pending_reason, "no node has gpu_type=H100");
  auto ls = cluster_.Cli({"ls", "-o", "json"}, token_);
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  auto list = json::parse(ls.out);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["pending_reason"], "no node has gpu_type=H100");
  auto nodes = cluster_.Cli({"nodes", "-o", "json"}, token_);
  ASSERT_EQ(nodes.exit_code, 0) << nodes.err;
  EXPECT_EQ(json::parse(nodes.out).size(), 2u);
}

TEST_F(JobsTest, FailingJobReportsExitCode) {
  std::string id = Submit({{"command", "echo oops; exit 3"}, {"resources", {{"gpu_count", 1}}}});
  auto job = WaitTerminal(*client_, id);
  EXPECT_EQ(job.status, api::JobStatus::kFailed);
  EXPECT_EQ(job.reason, "exit_code:3");
  EXPECT_EQ(job.exit_code, 3);
  auto wait = cluster_.Cli({"wait", id}, token_);
  EXPECT_NE(wait.exit_code, 0);
}

}  // namespace
}  // namespace tide::e2e

namespace tide::e2e {
namespace {

TEST(CliTest, AdminCommandsSpecFilesAndIdempotency) {
  Cluster cluster;
  cluster.StartServer();
  cluster.StartAgent("a1", "2xRTX4090:24GB");
  std::string admin_token = ReadAll(cluster.dir() + "/server/admin.token");
  admin_token.erase(admin_token.find_last_not_of("\n") + 1);

  auto add = cluster.Cli({"admin", "user", "add", "dora"}, admin_token);
  ASSERT_EQ(add.exit_code, 0) << add.err;
  std::string token = add.out.substr(add.out.find("tide_u_"), 71);
  auto join = cluster.Cli({"admin", "join-token"}, admin_token);
  ASSERT_EQ(join.exit_code, 0) << join.err;
  EXPECT_NE(join.out.find("tide_j_"), std::string::npos);
  auto denied = cluster.Cli({"admin", "user", "add", "eve"}, token);
  EXPECT_NE(denied.exit_code, 0) << "a user token is not an admin token";

  std::string spec = cluster.dir() + "/job.yaml";
  std::ofstream(spec) << "name: from-yaml\n"
                         "command: [\"sh\", \"-c\", \"echo yaml-ran\"]\n"
                         "resources:\n"
                         "  gpu_type: RTX 4090\n"
                         "  gpu_count: 1\n"
                         "max_runtime: 10m\n";
  auto sub = cluster.Cli({"submit", spec, "-o", "json"}, token);
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  std::string id = nlohmann::json::parse(sub.out)["id"];
  auto wait = cluster.Cli({"wait", id}, token);
  EXPECT_EQ(wait.exit_code, 0) << wait.err;
  auto logs = cluster.Cli({"logs", id}, token);
  EXPECT_NE(logs.out.find("yaml-ran"), std::string::npos);

  std::string bad = cluster.dir() + "/bad.yaml";
  std::ofstream(bad) << "name: bad\n"
                        "command: [\"true\"]\n"
                        "resources:\n"
                        "  gpu_count: 0\n";
  auto rejected = cluster.Cli({"submit", bad}, token);
  EXPECT_NE(rejected.exit_code, 0);
  EXPECT_NE(rejected.err.find("bad.yaml:4"), std::string::npos) << rejected.err;
  EXPECT_NE(rejected.err.find("resources.gpu_count"), std::string::npos) << rejected.err;

  auto first = cluster.Cli({"submit", "--idempotency-key", "k1", "-q", "--", "true"}, token);
  auto again = cluster.Cli({"submit", "--idempotency-key", "k1", "-q", "--", "true"}, token);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.out, again.out) << "the same key creates one job";
}

}  // namespace
}  // namespace tide::e2e
