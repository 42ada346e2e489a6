// What a job leaves behind: its secrets reach it and nothing else (the API,
// `tide status`, the logs of the server and the agent, the job's own log
// masks them), and once an attempt ends the provider's disk keeps nothing
// of it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class PrivacyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer();
    cluster_.StartAgent("a1", "2xRTX4090:24GB");
    token_ = cluster_.NewUser("alice");
    client_ = cluster_.ClientFor(token_);
  }
  // Every file under the cluster's directory whose name ends in ".log":
  // the server's and the agents' own logs.
  std::string DaemonLogs() const {
    std::string all;
    for (const auto& e : fs::directory_iterator(cluster_.dir())) {
      if (e.path().extension() == ".log") all += ReadAll(e.path().string());
    }
    return all;
  }
  std::string AgentJobs(const std::string& agent) const {
    std::string left;
    for (const auto& e : fs::recursive_directory_iterator(cluster_.dir() + "/agent-" + agent + "/jobs")) {
      left += e.path().string() + "\n";
    }
    return left;
  }
  Cluster cluster_;
  std::string token_;
  std::unique_ptr<api::Client> client_;
};

TEST_F(PrivacyTest, ASecretReachesTheJobAndIsShownNowhere) {
  const std::string value = "hf_e2e_secret_4242";
  ::setenv("TIDE_E2E_DB_PASSWORD", "pw-from-env-77", 1);
  auto sub = cluster_.Cli(
      {"submit", "--secret", "HF_TOKEN=" + value, "--secret", "TIDE_E2E_DB_PASSWORD", "-o", "json",
       "--", "sh", "-c",
       "echo \"token=$HF_TOKEN\"; printf 'split=%s' \"$(echo $HF_TOKEN | cut -c1-9)\"; sleep 0.5; "
       "echo \"$(echo $HF_TOKEN | cut -c10-)\"; echo \"pw=$TIDE_E2E_DB_PASSWORD\"; "
       "printf 'short=%s\\n' \"$(echo $HF_TOKEN | cut -c1-5)\""},
      token_);
  ::unsetenv("TIDE_E2E_DB_PASSWORD");
  ASSERT_EQ(sub.exit_code, 0) << sub.out << sub.err;
  EXPECT_EQ(sub.out.find(value), std::string::npos) << sub.out;
  json submitted = json::parse(sub.out);
  EXPECT_EQ(submitted["secrets"], json({"HF_TOKEN", "TIDE_E2E_DB_PASSWORD"}));
  const std::string id = submitted["id"];
  auto job = WaitTerminal(*client_, id);
  ASSERT_EQ(job.status, api::JobStatus::kCompleted) << job.reason;

  // The job had the values; its log has them masked, even the one written
  // in two pieces half a second apart. A piece shorter than the value is
  // just a few characters of it, and stays.
  auto logs = client_->GetLogs(id);
  ASSERT_TRUE(logs.ok()) << logs.status().ToString();
  EXPECT_EQ(*logs, "token=" + std::string(value.size(), '*') + "\n" + "split=" +
                       std::string(value.size(), '*') + "\n" + "pw=" +
                       std::string(14, '*') + "\nshort=hf_e2\n");

  auto status = cluster_.Cli({"status", id}, token_);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("HF_TOKEN, TIDE_E2E_DB_PASSWORD (values never shown)"), std::string::npos)
      << status.out;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"status", id}, {"status", id, "-o", "json"}, {"ls", "-o", "json"}}) {
    auto r = cluster_.Cli(args, token_);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.find(value), std::string::npos) << args[0] << ": " << r.out;
    EXPECT_EQ(r.out.find("pw-from-env-77"), std::string::npos) << args[0] << ": " << r.out;
  }
  std::string daemons = DaemonLogs();
  EXPECT_EQ(daemons.find(value), std::string::npos);
  EXPECT_EQ(daemons.find("pw-from-env-77"), std::string::npos);

  // Nothing of the attempt stays on the provider's disk.
  EXPECT_TRUE(Eventually([&] { return AgentJobs("a1").empty(); })) << AgentJobs("a1");
}

TEST_F(PrivacyTest, ASecretWithoutAValueIsRefusedBeforeAnythingIsSent) {
  ::unsetenv("TIDE_E2E_UNSET");
  auto r = cluster_.Cli({"submit", "--secret", "TIDE_E2E_UNSET", "--", "true"}, token_);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--secret TIDE_E2E_UNSET: not set in this environment"), std::string::npos)
      << r.err;
  const std::string spec = cluster_.dir() + "/job.yaml";
  std::ofstream(spec) << "command: [\"true\"]\nsecrets:\n  HF_TOKEN:\n";
  r = cluster_.Cli({"submit", spec}, token_);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("job.yaml:3: secrets.HF_TOKEN: has no value: give it with tide submit "
                       "--secret HF_TOKEN"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(client_->ListJobs({})->jobs.empty());
}

TEST_F(PrivacyTest, RmDeletesAJobsDataForGoodAndKeepsItsBill) {
  const std::string code = cluster_.dir() + "/code";
  fs::create_directories(code);
  std::ofstream(code + "/run.sh") << "echo private-log-line\n"
                                    "echo private-output > \"$TIDE_OUTPUT_DIR/result.txt\"\n"
                                    "echo '{\"loss\": 0.5}' >> \"$TIDE_METRICS_FILE\"\n";
  auto sub = cluster_.Cli({"submit", "--code", code, "-q", "--", "sh", "run.sh"}, token_);
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  const std::string id = sub.out.substr(0, sub.out.find('\n'));
  ASSERT_EQ(WaitTerminal(*client_, id).status, api::JobStatus::kCompleted);
  ASSERT_NE(client_->GetLogs(id)->find("private-log-line"), std::string::npos);
  const std::string code_id = client_->GetJob(id)->spec.code;
  const std::string blobs = cluster_.dir() + "/server/blobs";
  ASSERT_TRUE(fs::exists(blobs + "/outputs/" + id + "/result.txt"));
  ASSERT_TRUE(fs::exists(blobs + "/code"));

  // A job still running is refused, and keeps everything.
  auto running = cluster_.Cli({"submit", "-q", "--", "sleep", "30"}, token_);
  const std::string running_id = running.out.substr(0, running.out.find('\n'));
  auto refused = cluster_.Cli({"rm", running_id}, token_);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("cancel it first (tide cancel " + running_id + ")"), std::string::npos)
      << refused.err;

  auto rm = cluster_.Cli({"rm", id}, token_);
  ASSERT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(rm.out, id + " deleted (completed)\n");
  for (const char* sub_dir : {"logs", "metrics", "outputs", "checkpoints"}) {
    EXPECT_FALSE(fs::exists(blobs + "/" + sub_dir + "/" + id)) << sub_dir;
  }
  std::string archives;
  for (const auto& e : fs::recursive_directory_iterator(blobs + "/code")) archives += e.path().string();
  EXPECT_EQ(archives.find(code_id), std::string::npos) << archives;
  auto logs = cluster_.Cli({"logs", id}, token_);
  EXPECT_NE(logs.exit_code, 0);
  EXPECT_NE(logs.err.find("was deleted"), std::string::npos) << logs.err;
  EXPECT_NE(cluster_.Cli({"outputs", id}, token_).exit_code, 0);
  // What billing needs stays: the status, the attempts, the cost.
  auto status = cluster_.Cli({"status", id, "-o", "json"}, token_);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  json kept = json::parse(status.out);
  EXPECT_EQ(kept["status"], "completed");
  EXPECT_GT(kept["deleted_at"].get<int64_t>(), 0);
  EXPECT_EQ(kept["attempts"].size(), 1u);
  EXPECT_TRUE(kept.contains("cost"));
  EXPECT_EQ(kept["command"], json::array());
  EXPECT_EQ(status.out.find("run.sh"), std::string::npos);
  EXPECT_EQ(cluster_.Cli({"rm", id}, token_).exit_code, 0) << "deleting again is not an error";
  auto audit = cluster_.Cli({"admin", "audit", "-o", "json"}, cluster_.admin_token());
  ASSERT_EQ(audit.exit_code, 0) << audit.err;
  EXPECT_NE(audit.out.find("\"job.delete\""), std::string::npos) << audit.out;
  // A restart finds the job deleted still.
  cluster_.KillServer(SIGKILL);
  cluster_.StartServer();
  EXPECT_GT(client_->GetJob(id)->deleted_at, 0);
}

}  // namespace
}  // namespace tide::e2e
