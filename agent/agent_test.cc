// The whole agent (RunAgent) against FakeServer, with real processes: the
// life of a job as the server sees it. AgentOverHttpTest runs a few of the
// same tests through FakeAgentServer over real HTTP, where the wire (the
// requests, statuses and error bodies) is what is tested.
#include "agent/agent.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/runtime/process_tree.h"
#include "agent/testing/fake_agent_server.h"
#include "agent/testing/fake_server.h"
#include "common/archive.h"
#include "common/paths.h"

namespace tide::agent {
namespace {

namespace fs = std::filesystem;
using testing::FakeAgentServer;
using testing::FakeServer;

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tide-agent-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    if (::geteuid() == 0) {
      ::chmod(dir_.c_str(), 0711);  // sandboxed jobs, as their own uids, reach their dirs
    } else {
      options_.runtime = "process";  // the sandbox needs root
      options_.insecure_process_runtime = true;
    }
    options_.server_link = &server_;
    options_.join_token = testing::kJoinToken;
    options_.data_dir = dir_ + "/agent";
    options_.name = "test-node";
    options_.fake_gpus = "2xRTX4090:24GB";
    options_.heartbeat_interval_ms = 100;
    options_.handle_signals = false;
    options_.stop = &stop_;
    options_.shutdown_report_timeout_ms = 2'000;
    options_.log_level = "warn";
  }
  void TearDown() override {
    StopAgent();
    fs::remove_all(dir_);
  }

  void StartAgent() {
    stop_ = false;
    exit_code_ = -1;
    int before = server_.heartbeats();
    agent_ = std::thread([this] { exit_code_ = RunAgent(options_); });
    ASSERT_TRUE(FakeServer::WaitFor([&] { return server_.heartbeats() > before; }));
  }
  int StopAgent() {
    if (agent_.joinable()) {
      stop_ = true;
      agent_.join();
    }
    return exit_code_;
  }

  static api::Job MakeJob(const std::string& id, const std::string& script,
                          std::vector<int> gpus = {0}) {
    api::Job job;
    job.id = id;
    job.attempt = 1;
    job.status = api::JobStatus::kStarting;
    job.spec.command = {"sh", "-c", script};
    job.spec.grace_s = 5;
    job.spec.resources.gpu_count = static_cast<int>(gpus.size());
    job.gpus = std::move(gpus);
    return job;
  }

  bool WaitExited(const std::string& job_id, int timeout_ms = 15'000) {
    return FakeServer::WaitFor(
        [&] {
          for (const auto& e : server_.Events(job_id)) {
            if (e.state == "exited") return true;
          }
          return false;
        },
        timeout_ms);
  }
  api::JobEvent Exited(const std::string& job_id) {
    for (const auto& e : server_.Events(job_id)) {
      if (e.state == "exited") return e;
    }
    return {};
  }
  bool InRunningList(const std::string& job_id) {
    for (const auto& r : server_.LastHeartbeat().running) {
      if (r.job_id == job_id) return true;
    }
    return false;
  }
  // Our descendants carrying the job's tag (other test binaries may run
  // jobs with the same ids at the same time).
  static int TaggedProcesses(const std::string& job_id) {
    int n = 0;
    std::vector<ProcInfo> procs = ListProcesses();
    for (const ProcInfo& p : procs) {
      if (p.state != 'Z' && IsDescendantOf(procs, p.pid, getpid()) &&
          EnvironHasAll(p.pid, {"TIDE_JOB_ID=" + job_id})) {
        ++n;
      }
    }
    return n;
  }

  // Tests that run both in-process and over HTTP.
  void RunsAJobAndReportsEverything();
  void LogGapStopsTheLogNotTheJob();
  void RejectedJobIsKilled();
  void CodeArchiveIsUnpackedIntoWorkDir();
  void RestartReusesTheNodeToken();
  void RevokedTokenStopsTheAgent();

  FakeServer server_;
  std::string dir_;
  AgentOptions options_;
  std::atomic<bool> stop_{false};
  std::thread agent_;
  std::atomic<int> exit_code_{-1};
};

class AgentOverHttpTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    options_.server_link = nullptr;
    options_.server = http_.url();
  }

  FakeAgentServer http_{&server_};
};

void AgentTest::RunsAJobAndReportsEverything() {
  StartAgent();
  // The node registered with its fake GPUs and heartbeats telemetry.
  api::Heartbeat hb = server_.LastHeartbeat();
  ASSERT_EQ(hb.gpus.size(), 2u);
  EXPECT_EQ(hb.gpus[1].model, "RTX4090");
  EXPECT_EQ(hb.gpus[1].utilization_pct, 0);
  EXPECT_EQ(server_.joins(), 1);
  struct stat st {};
  ASSERT_EQ(stat((options_.data_dir + "/node.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(options_.data_dir.c_str(), &st), 0);
  // Sandboxed jobs may enter it to reach their own directories, not list it.
  EXPECT_EQ(st.st_mode & 0777, ::geteuid() == 0 ? 0711u : 0700u);

  api::Job job = MakeJob("j-ok", R"(
    echo hello; echo oops >&2
    env | grep -E '^(TIDE_|CUDA_|NVIDIA_)' | sort > "$TIDE_OUTPUT_DIR/env.txt"
    mkdir -p "$TIDE_OUTPUT_DIR/sub" && echo deep > "$TIDE_OUTPUT_DIR/sub/file.txt"
    ln -s /etc/hostname "$TIDE_OUTPUT_DIR/link"
    pwd > "$TIDE_OUTPUT_DIR/pwd"
    sleep 0.5
    exit 3)",
                         {1});
  job.spec.env = {{"MY_VAR", "x"}, {"TIDE_JOB_ID", "spoofed"}};
  server_.Assign(job);
  ASSERT_TRUE(FakeServer::WaitFor([&] { return InRunningList("j-ok"); }));
  ASSERT_TRUE(FakeServer::WaitFor(
      [&] { return server_.LastHeartbeat().gpus[1].utilization_pct == 90; }));
  ASSERT_TRUE(WaitExited("j-ok"));

  auto events = server_.Events("j-ok");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].state, "running");
  EXPECT_EQ(events[0].attempt, 1);
  EXPECT_EQ(events[1].state, "exited");
  EXPECT_EQ(events[1].exit_code, 3);
  EXPECT_EQ(events[1].reason, "");
  EXPECT_EQ(server_.Log("j-ok", 1), "hello\noops\n");

  auto outputs = server_.Outputs("j-ok", 1);
  EXPECT_EQ(outputs.count("link"), 0u);  // symlinks are skipped
  EXPECT_EQ(outputs["sub/file.txt"], "deep\n");
  std::string root = fs::absolute(options_.data_dir).string() + "/jobs/j-ok/1";
  EXPECT_EQ(outputs["pwd"], root + "/work\n");
  std::string env = outputs["env.txt"];
  EXPECT_NE(env.find("CUDA_VISIBLE_DEVICES=1\n"), std::string::npos) << env;
  EXPECT_NE(env.find("CUDA_DEVICE_ORDER=PCI_BUS_ID\n"), std::string::npos);
  EXPECT_NE(env.find("NVIDIA_VISIBLE_DEVICES=1\n"), std::string::npos);
  EXPECT_NE(env.find("TIDE_JOB_ID=j-ok\n"), std::string::npos);  // not the spoofed one
  EXPECT_NE(env.find("TIDE_ATTEMPT=1\n"), std::string::npos);
  EXPECT_NE(env.find("TIDE_OUTPUT_DIR=" + root + "/output\n"), std::string::npos);
  EXPECT_NE(env.find("TIDE_CHECKPOINT_DIR=" + root + "/checkpoint\n"), std::string::npos);
  EXPECT_NE(env.find("TIDE_NOTICE_FILE=" + root + "/control/notice\n"), std::string::npos);
  EXPECT_NE(env.find("TIDE_GPU_UUIDS=GPU-"), std::string::npos);

  // Reported: it leaves the running list; a re-delivery is ignored.
  ASSERT_TRUE(FakeServer::WaitFor([&] { return !InRunningList("j-ok"); }));
  server_.Assign(job);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(server_.Events("j-ok").size(), 2u);
  EXPECT_EQ(StopAgent(), 0);
}

TEST_F(AgentTest, RunsAJobAndReportsEverything) { RunsAJobAndReportsEverything(); }
TEST_F(AgentOverHttpTest, RunsAJobAndReportsEverything) { RunsAJobAndReportsEverything(); }

TEST_F(AgentTest, CancelGivesNoticeThenKillsTheTree) {
  StartAgent();
  api::Job job = MakeJob("j-cancel", R"(
    setsid sleep 300 &
    trap 'cat "$TIDE_NOTICE_FILE" > "$TIDE_OUTPUT_DIR/notice"; echo got-term; exit 0' TERM
    echo ready
    while :; do sleep 0.05; done)");
  server_.Assign(job);
  ASSERT_TRUE(FakeServer::WaitFor([&] { return server_.Log("j-cancel", 1) == "ready\n"; }));
  EXPECT_GE(TaggedProcesses("j-cancel"), 2);  // sh, the setsid sleep (and the loop's sleep)
  server_.Cancel({"j-cancel", 1, "cancelled", 5});
  ASSERT_TRUE(WaitExited("j-cancel"));
  api::JobEvent e = Exited("j-cancel");
  EXPECT_EQ(e.reason, "cancelled");
  EXPECT_EQ(e.exit_code, 0);
  std::string notice = server_.Outputs("j-cancel", 1)["notice"];
  EXPECT_EQ(notice.rfind("reason=cancelled\ndeadline=", 0), 0u) << notice;
  EXPECT_NE(server_.Log("j-cancel", 1).find("got-term"), std::string::npos);
  EXPECT_EQ(TaggedProcesses("j-cancel"), 0);
}

TEST_F(AgentTest, MaxRuntimeKillsAfterGrace) {
  StartAgent();
  api::Job job = MakeJob("j-timeout", "trap '' TERM; echo started; sleep 300; echo never");
  job.spec.max_runtime_s = 1;
  job.spec.grace_s = 1;
  server_.Assign(job);
  ASSERT_TRUE(WaitExited("j-timeout"));
  api::JobEvent e = Exited("j-timeout");
  EXPECT_EQ(e.reason, "timeout");
  EXPECT_EQ(e.exit_code, 128 + 9);
  EXPECT_EQ(server_.Log("j-timeout", 1), "started\n");
  EXPECT_EQ(TaggedProcesses("j-timeout"), 0);
}

TEST_F(AgentTest, UnorderedSignalIsReported) {
  StartAgent();
  server_.Assign(MakeJob("j-sig", "kill -KILL $$"));
  ASSERT_TRUE(WaitExited("j-sig"));
  api::JobEvent e = Exited("j-sig");
  EXPECT_EQ(e.reason, "signal:9");
  EXPECT_EQ(e.exit_code, 137);
}

TEST_F(AgentTest, StartFailureIsReported) {
  StartAgent();
  api::Job job = MakeJob("j-nocmd", "");
  job.spec.command = {"no-such-program-xyz", "--flag"};
  server_.Assign(job);
  ASSERT_TRUE(WaitExited("j-nocmd"));
  auto events = server_.Events("j-nocmd");
  ASSERT_EQ(events.size(), 1u);  // never "running"
  EXPECT_EQ(events[0].reason, "start_failed");
  EXPECT_NE(events[0].message.find("command not found"), std::string::npos) << events[0].message;

  api::Job bad_gpu = MakeJob("j-badgpu", "true", {7});
  server_.Assign(bad_gpu);
  ASSERT_TRUE(WaitExited("j-badgpu"));
  EXPECT_EQ(Exited("j-badgpu").reason, "start_failed");
}

TEST_F(AgentTest, LogsSurviveServerOutagesWithoutLossOrDuplication) {
  StartAgent();
  // ~1.2 MB of numbered lines, written while the server goes down and up.
  api::Job job = MakeJob("j-logs", R"(
    i=0
    while [ $i -lt 30 ]; do
      seq -f "line $i %g" 1 4000
      i=$((i+1)); sleep 0.05
    done)");
  server_.Assign(job);
  ASSERT_TRUE(FakeServer::WaitFor([&] { return !server_.Log("j-logs", 1).empty(); }));
  server_.SetDown(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  server_.SetDown(false);
  server_.FailEvents(3);  // the exit report fails a few times too
  ASSERT_TRUE(WaitExited("j-logs", 30'000));
  std::string expected;
  for (int i = 0; i < 30; ++i) {
    for (int n = 1; n <= 4000; ++n) {
      expected += "line " + std::to_string(i) + " " + std::to_string(n) + "\n";
    }
  }
  std::string got = server_.Log("j-logs", 1);
  EXPECT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected);
  EXPECT_EQ(Exited("j-logs").exit_code, 0);
  EXPECT_GT(server_.log_posts(), 3);
}

void AgentTest::LogGapStopsTheLogNotTheJob() {
  StartAgent();
  server_.Assign(MakeJob("j-gap", "echo one; sleep 0.6; echo two; sleep 0.3; exit 0"));
  ASSERT_TRUE(FakeServer::WaitFor([&] { return server_.Log("j-gap", 1) == "one\n"; }));
  server_.LoseLog("j-gap", 1);  // the next post (offset 4) is a gap: 409
  ASSERT_TRUE(WaitExited("j-gap"));
  EXPECT_EQ(Exited("j-gap").exit_code, 0);
  EXPECT_EQ(Exited("j-gap").reason, "");
  EXPECT_EQ(server_.Log("j-gap", 1), "");
}

TEST_F(AgentTest, LogGapStopsTheLogNotTheJob) { LogGapStopsTheLogNotTheJob(); }
TEST_F(AgentOverHttpTest, LogGapStopsTheLogNotTheJob) { LogGapStopsTheLogNotTheJob(); }

void AgentTest::RejectedJobIsKilled() {
  StartAgent();
  server_.Assign(MakeJob("j-gone", "while :; do echo tick; sleep 0.1; done"));
  ASSERT_TRUE(FakeServer::WaitFor([&] { return InRunningList("j-gone"); }));
  ASSERT_TRUE(FakeServer::WaitFor([&] { return !server_.Log("j-gone", 1).empty(); }));
  server_.RejectJob("j-gone");                     // the next log post gets a 404
  server_.Cancel({"j-other", 1, "cancelled", 0});  // an order for an unknown job: ignored
  ASSERT_TRUE(FakeServer::WaitFor([&] { return !InRunningList("j-gone"); }));
  EXPECT_EQ(TaggedProcesses("j-gone"), 0);
  EXPECT_FALSE(WaitExited("j-gone", 200));  // the server refused the report
}

TEST_F(AgentTest, RejectedJobIsKilled) { RejectedJobIsKilled(); }
TEST_F(AgentOverHttpTest, RejectedJobIsKilled) { RejectedJobIsKilled(); }

void AgentTest::CodeArchiveIsUnpackedIntoWorkDir() {
  fs::create_directories(dir_ + "/code/pkg");
  std::ofstream(dir_ + "/code/run.sh") << "#!/bin/sh\ncat pkg/data.txt\n";
  std::ofstream(dir_ + "/code/pkg/data.txt") << "from the archive\n";
  fs::permissions(dir_ + "/code/run.sh", fs::perms::owner_all);
  auto archive = PackDirectory(dir_ + "/code");
  ASSERT_TRUE(archive.ok()) << archive.status().ToString();
  server_.SetCode("j-code", *archive);
  StartAgent();
  api::Job job = MakeJob("j-code", "");
  job.spec.command = {"./run.sh"};
  job.spec.code = std::string(64, 'c');
  server_.Assign(job);
  ASSERT_TRUE(WaitExited("j-code"));
  EXPECT_EQ(Exited("j-code").exit_code, 0) << Exited("j-code").message;
  EXPECT_EQ(server_.Log("j-code", 1), "from the archive\n");
}

TEST_F(AgentTest, CodeArchiveIsUnpackedIntoWorkDir) { CodeArchiveIsUnpackedIntoWorkDir(); }
TEST_F(AgentOverHttpTest, CodeArchiveIsUnpackedIntoWorkDir) { CodeArchiveIsUnpackedIntoWorkDir(); }

TEST_F(AgentTest, ShutdownStopsJobsAndReports) {
  StartAgent();
  server_.Assign(MakeJob("j-long", "trap 'echo bye; exit 5' TERM; while :; do sleep 0.05; done"));
  ASSERT_TRUE(FakeServer::WaitFor([&] { return InRunningList("j-long"); }));
  EXPECT_EQ(StopAgent(), 0);
  api::JobEvent e = Exited("j-long");
  EXPECT_EQ(e.state, "exited");
  EXPECT_EQ(e.reason, "agent_shutdown");
  EXPECT_EQ(e.exit_code, 5);
  EXPECT_EQ(TaggedProcesses("j-long"), 0);
}

void AgentTest::RestartReusesTheNodeToken() {
  StartAgent();
  EXPECT_EQ(StopAgent(), 0);
  options_.join_token.clear();
  StartAgent();
  EXPECT_EQ(server_.joins(), 1);
  EXPECT_EQ(server_.re_registrations(), 1);
  EXPECT_EQ(StopAgent(), 0);
}

TEST_F(AgentTest, RestartReusesTheNodeToken) { RestartReusesTheNodeToken(); }
TEST_F(AgentOverHttpTest, RestartReusesTheNodeToken) { RestartReusesTheNodeToken(); }

void AgentTest::RevokedTokenStopsTheAgent() {
  StartAgent();
  server_.Assign(MakeJob("j-rev", "sleep 300"));
  ASSERT_TRUE(FakeServer::WaitFor([&] { return TaggedProcesses("j-rev") > 0; }));
  server_.RevokeNodeTokens();
  agent_.join();
  EXPECT_EQ(exit_code_, 1);
  EXPECT_EQ(TaggedProcesses("j-rev"), 0);
}

TEST_F(AgentTest, RevokedTokenStopsTheAgent) { RevokedTokenStopsTheAgent(); }
TEST_F(AgentOverHttpTest, RevokedTokenStopsTheAgent) { RevokedTokenStopsTheAgent(); }

TEST_F(AgentTest, FailsClearlyWithoutTokens) {
  options_.join_token.clear();
  EXPECT_EQ(RunAgent(options_), 1);
  options_.fake_gpus = "2xA100";
  options_.join_token = testing::kJoinToken;
  EXPECT_EQ(RunAgent(options_), 1);
}

}  // namespace
}  // namespace tide::agent
