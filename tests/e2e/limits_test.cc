// Job limits through a real agent: each job runs in a cgroup of its own
// (docs/security.md), so memory past resources.memory ends the job with
// reason oom while the agent and the next job go on, a fork bomb stops at
// the agent's pids limit, and resources.cpus is enforced.
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

class LimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "job cgroups need root on this host";
    cluster_.StartServer();
    cluster_.StartAgent("a", "2xRTX4090:24GB", {"--job-pids-limit", "200"});
    client_ = cluster_.ClientFor(cluster_.NewUser("alice"));
  }
  Cluster cluster_;
  std::unique_ptr<api::Client> client_;
};

TEST_F(LimitsTest, MemoryPastTheLimitEndsTheJobWithOomAndNothingElse) {
  std::string hog = SubmitOk(*client_, {{"command", "python3 -c 'a = bytearray(1 << 30); print(len(a))'"},
                                        {"resources", {{"memory", "64MB"}}}});
  std::string neighbour = SubmitOk(*client_, {{"command", "sleep 2; echo still here"}});
  api::Job done = WaitTerminal(*client_, hog);
  EXPECT_EQ(done.status, api::JobStatus::kFailed);
  EXPECT_EQ(done.reason, "oom");
  api::Job next = WaitTerminal(*client_, neighbour);
  EXPECT_EQ(next.status, api::JobStatus::kCompleted) << next.reason;
  EXPECT_NE(client_->GetLogs(neighbour)->find("still here"), std::string::npos);
  // The agent goes on serving.
  std::string after = SubmitOk(*client_, {{"command", "echo ok"}});
  EXPECT_EQ(WaitTerminal(*client_, after).status, api::JobStatus::kCompleted);
}

TEST_F(LimitsTest, AgentCheckSaysWhatThisHostGivesJobs) {
  CliResult r = cluster_.Cli({"agent", "check"}, "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("job cgroups"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a test cgroup with memory, CPU and pids limits was made and removed"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("user namespaces"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("runtime"), std::string::npos) << r.out;
}

TEST_F(LimitsTest, AForkBombStopsAtThePidsLimit) {
  // Forks until fork fails, then reports how many it got.
  std::string bomb = SubmitOk(
      *client_, {{"command", "python3 -c '\n"
                             "import os, time\n"
                             "n = 0\n"
                             "try:\n"
                             "    while n < 5000:\n"
                             "        if os.fork() == 0:\n"
                             "            time.sleep(30); os._exit(0)\n"
                             "        n += 1\n"
                             "except OSError as e:\n"
                             "    print(\"fork failed after\", n, e.errno, flush=True)\n'"},
                 {"max_runtime", "60s"}});
  api::Job done = WaitTerminal(*client_, bomb, std::chrono::seconds(90));
  EXPECT_EQ(done.status, api::JobStatus::kCompleted) << done.reason;
  std::string log = *client_->GetLogs(bomb);
  EXPECT_NE(log.find("fork failed after"), std::string::npos) << log;
  size_t at = log.find("after ");
  int got = at == std::string::npos ? -1 : std::stoi(log.substr(at + 6));
  EXPECT_GT(got, 0);
  EXPECT_LT(got, 200);
  std::string after = SubmitOk(*client_, {{"command", "echo ok"}});
  EXPECT_EQ(WaitTerminal(*client_, after).status, api::JobStatus::kCompleted);
}

}  // namespace
}  // namespace tide::e2e
