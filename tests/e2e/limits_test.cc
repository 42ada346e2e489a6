// Job limits through a real agent: each job runs in a cgroup of its own
// (docs/security.md), so memory past resources.memory ends the job with
// reason oom while the agent and the next job go on, a fork bomb stops at
// the agent's pids limit, and a job spinning on every core under
// resources.cpus is throttled (the cgroup's own counters).
#include <gtest/gtest.h>
#include <unistd.h>

#include <sstream>
#include <thread>

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

// The cpu.stat file of the cgroup `pid` is in, on the host: v1 cpu
// controller, else the unified tree. Resolved once: the process may be one
// that exits before the second read.
std::string CpuStatPathOf(pid_t pid) {
  std::istringstream in(ReadAll("/proc/" + std::to_string(pid) + "/cgroup"));
  std::string line, v2;
  while (std::getline(in, line)) {
    size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::istringstream cs(controllers);
    std::string c;
    while (std::getline(cs, c, ',')) {
      if (c == "cpu") return "/sys/fs/cgroup/" + controllers + path + "/cpu.stat";
    }
    if (controllers.empty()) v2 = path;
  }
  return "/sys/fs/cgroup" + v2 + "/cpu.stat";
}

int64_t StatField(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  int64_t v;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return -1;
}

TEST_F(LimitsTest, ASpinnerOnEveryCoreIsThrottledToItsCpus) {
  std::string spin = SubmitOk(*client_, {{"command", "for i in 1 2 3; do sh -c 'while :; do :; done' & done; "
                                                     "touch ready; sleep 120"},
                                         {"resources", {{"cpus", 0.5}}}});
  ASSERT_TRUE(Eventually([&] { return !JobProcesses(spin).empty() &&
                                      client_->GetJob(spin)->status == api::JobStatus::kRunning; }));
  std::vector<pid_t> procs;
  ASSERT_TRUE(Eventually([&] {
    procs = JobProcesses(spin);
    return procs.size() >= 4;
  }));
  // Counters, not wall time: over a few periods the cgroup must have been
  // throttled in most of them, for a good part of each.
  std::string stat, before;
  for (auto p = procs.rbegin(); p != procs.rend() && before.empty(); ++p) {
    stat = CpuStatPathOf(*p);  // the first one still there
    before = ReadAll(stat);
  }
  ASSERT_GE(StatField(before, "nr_periods"), 0) << stat << ": " << before;
  std::this_thread::sleep_for(std::chrono::seconds(2));
  std::string after = ReadAll(stat);
  int64_t periods = StatField(after, "nr_periods") - StatField(before, "nr_periods");
  int64_t throttled = StatField(after, "nr_throttled") - StatField(before, "nr_throttled");
  EXPECT_GE(periods, 5) << after;
  EXPECT_GE(throttled * 2, periods) << after;  // throttled in at least half the periods
  ASSERT_TRUE(client_->CancelJob(spin).ok());
  EXPECT_EQ(WaitTerminal(*client_, spin).status, api::JobStatus::kCancelled);
}

}  // namespace
}  // namespace tide::e2e
