// JobRunner over FakeRuntime and FakeServer: the life of one attempt as the
// runner drives it, with no processes and no HTTP.
#include "agent/job_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "agent/srun.h"
#include "agent/testing/fake_runtime.h"
#include "agent/testing/fake_server.h"
#include "common/archive.h"
#include "common/paths.h"

namespace tide::agent {
namespace {

namespace fs = std::filesystem;
using testing::FakeJob;
using testing::FakeRuntime;
using testing::FakeServer;

class JobRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tide-runner-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    runner_.reset();
    fs::remove_all(dir_);
  }

  static api::Job MakeJob(const std::string& id) {
    api::Job job;
    job.id = id;
    job.attempt = 1;
    job.spec.command = {"train"};
    job.spec.grace_s = 5;
    job.gpus = {1};
    return job;
  }

  void Start(const api::Job& job, const Clock* clock = SystemClock::Default()) {
    RunnerDeps deps;
    deps.server = &server_;
    deps.data_dir = dir_;
    deps.runtime = &runtime_;
    deps.node_gpus.resize(2);
    deps.node_gpus[0].index = 0;
    deps.node_gpus[1].index = 1;
    deps.clock = clock;
    deps.min_backoff_ms = 10;
    deps.max_backoff_ms = 50;
    deps.ship_interval_ms = 20;
    runner_ = std::make_unique<JobRunner>(job, std::move(deps));
    runner_->Start();
  }

  std::shared_ptr<FakeJob> Started() {
    auto job = runtime_.WaitStarted(0);
    EXPECT_NE(job, nullptr);
    return job;
  }

  bool WaitDone() {
    return FakeServer::WaitFor([&] { return runner_->done(); });
  }
  api::JobEvent Exited(const std::string& job_id) {
    for (const auto& e : server_.Events(job_id)) {
      if (e.state == "exited") return e;
    }
    return {};
  }

  std::string dir_;
  FakeServer server_;
  FakeRuntime runtime_;
  std::unique_ptr<JobRunner> runner_;
};

TEST_F(JobRunnerTest, RunsTheJobAndReportsItsExit) {
  Start(MakeJob("j-1"));
  auto job = Started();
  EXPECT_EQ(job->spec().argv, (std::vector<std::string>{"train"}));
  EXPECT_EQ(job->spec().env.at("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(job->spec().work_dir, dir_ + "/jobs/j-1/1/work");
  EXPECT_EQ(job->spec().cgroup_key, "j-1.1");
  EXPECT_EQ(job->spec().devices,
            (std::vector<std::string>{"nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}));
  job->Write("hello\n");
  ASSERT_TRUE(FakeServer::WaitFor([&] { return server_.Log("j-1", 1) == "hello\n"; }));
  job->Write("bye\n");
  job->Exit({3, 0});
  ASSERT_TRUE(WaitDone());
  auto events = server_.Events("j-1");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].state, "running");
  EXPECT_EQ(events[1].state, "exited");
  EXPECT_EQ(events[1].exit_code, 3);
  EXPECT_EQ(events[1].reason, "");
  EXPECT_EQ(server_.Log("j-1", 1), "hello\nbye\n");
  // Acknowledged: nothing of the job is left on the node.
  EXPECT_FALSE(fs::exists(dir_ + "/jobs/j-1"));
  EXPECT_TRUE(fs::is_empty(dir_ + "/jobs"));
}

TEST_F(JobRunnerTest, StopGivesNoticeThenSigtermThenKillsAfterTheGrace) {
  Start(MakeJob("j-stop"));
  auto job = Started();
  runner_->Stop("cancelled", 1);
  ASSERT_TRUE(job->WaitSignal(SIGTERM));
  auto notice = ReadFile(dir_ + "/jobs/j-stop/1/control/notice");
  ASSERT_TRUE(notice.ok());
  EXPECT_EQ(notice->rfind("reason=cancelled\ndeadline=", 0), 0u) << *notice;
  runner_->Stop("preempted", 30);  // a later order keeps the first reason and grace
  ASSERT_TRUE(WaitDone());
  EXPECT_GE(job->kill_trees(), 1);
  api::JobEvent e = Exited("j-stop");
  EXPECT_EQ(e.reason, "cancelled");
  EXPECT_EQ(e.exit_code, 128 + SIGKILL);
}

TEST_F(JobRunnerTest, AJobThatExitsOnTheNoticeKeepsItsExitCode) {
  Start(MakeJob("j-term"));
  auto job = Started();
  job->ExitOnSignal(SIGTERM, {0, 0});
  runner_->Stop("preempted", 30);
  ASSERT_TRUE(WaitDone());
  api::JobEvent e = Exited("j-term");
  EXPECT_EQ(e.reason, "preempted");
  EXPECT_EQ(e.exit_code, 0);
}

TEST_F(JobRunnerTest, ZeroGraceKillsWithoutSigterm) {
  Start(MakeJob("j-now"));
  auto job = Started();
  runner_->Stop("node_draining", 0);
  ASSERT_TRUE(WaitDone());
  EXPECT_TRUE(job->signals().empty());
  EXPECT_EQ(Exited("j-now").reason, "node_draining");
}

TEST_F(JobRunnerTest, MaxRuntimeStopsTheJobWithItsGrace) {
  FakeClock clock;
  api::Job spec = MakeJob("j-timeout");
  spec.spec.max_runtime_s = 60;
  spec.spec.grace_s = 10;
  Start(spec, &clock);
  auto job = Started();
  clock.Advance(59'000);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(job->signals().empty());
  clock.Advance(1'000);
  ASSERT_TRUE(job->WaitSignal(SIGTERM));
  EXPECT_EQ(job->kill_trees(), 0);
  clock.Advance(10'000);
  ASSERT_TRUE(WaitDone());
  EXPECT_EQ(Exited("j-timeout").reason, "timeout");
  EXPECT_EQ(Exited("j-timeout").exit_code, 137);
}

TEST_F(JobRunnerTest, OomAndForeignSignalsAreTheirOwnReasons) {
  Start(MakeJob("j-oom"));
  Started()->Exit({0, SIGKILL, /*oom=*/true});
  ASSERT_TRUE(WaitDone());
  EXPECT_EQ(Exited("j-oom").reason, "oom");
  EXPECT_EQ(Exited("j-oom").exit_code, 137);
  EXPECT_NE(Exited("j-oom").message.find("resources.memory"), std::string::npos);

  runner_.reset();
  Start(MakeJob("j-sig"));
  runtime_.WaitStarted(1)->Exit({0, SIGSEGV});
  ASSERT_TRUE(WaitDone());
  EXPECT_EQ(Exited("j-sig").reason, "signal:11");
  EXPECT_EQ(Exited("j-sig").exit_code, 139);
}

TEST_F(JobRunnerTest, StartFailuresAreReportedWithoutRunning) {
  runtime_.FailNextStart(Status::InvalidArgument("command not found: train"));
  Start(MakeJob("j-nocmd"));
  ASSERT_TRUE(WaitDone());
  auto events = server_.Events("j-nocmd");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].reason, "start_failed");
  EXPECT_NE(events[0].message.find("command not found"), std::string::npos);
  EXPECT_EQ(server_.Log("j-nocmd", 1), "tide: start failed: command not found: train\n");

  runner_.reset();
  api::Job bad_gpu = MakeJob("j-badgpu");
  bad_gpu.gpus = {7};
  Start(bad_gpu);
  ASSERT_TRUE(WaitDone());
  EXPECT_EQ(Exited("j-badgpu").reason, "start_failed");
  EXPECT_NE(Exited("j-badgpu").message.find("GPU index 7"), std::string::npos);

  runner_.reset();
  api::Job bad_image = MakeJob("j-image");
  bad_image.spec.image = "pytorch";
  Start(bad_image);
  ASSERT_TRUE(WaitDone());
  EXPECT_NE(Exited("j-image").message.find("not offered by this agent"), std::string::npos);
  EXPECT_EQ(runtime_.started(), 0u);
}

TEST_F(JobRunnerTest, ARejectedJobIsKilledAndNotReported) {
  Start(MakeJob("j-gone"));
  auto job = Started();
  ASSERT_TRUE(FakeServer::WaitFor([&] { return server_.Events("j-gone").size() == 1; }));
  server_.RejectJob("j-gone");
  job->Write("tick\n");  // the next log post is refused: 404
  ASSERT_TRUE(WaitDone());
  EXPECT_GE(job->kill_trees(), 1);
  EXPECT_EQ(server_.Events("j-gone").size(), 1u);  // "running" only
  EXPECT_FALSE(fs::exists(dir_ + "/jobs/j-gone")) << "a job the server gave up leaves nothing";
}

TEST_F(JobRunnerTest, OutputsCheckpointAndCompleteMetricLinesAreUploaded) {
  Start(MakeJob("j-out"));
  auto job = Started();
  const auto& env = job->spec().env;
  fs::create_directories(env.at("TIDE_OUTPUT_DIR") + "/sub");
  std::ofstream(env.at("TIDE_OUTPUT_DIR") + "/sub/result.txt") << "42\n";
  std::ofstream(env.at("TIDE_CHECKPOINT_DIR") + "/step") << "100\n";
  std::ofstream(env.at("TIDE_METRICS_FILE")) << "{\"loss\":1}\n{\"loss\":0.";
  job->Exit({1, 0});
  ASSERT_TRUE(WaitDone());
  EXPECT_EQ(server_.Outputs("j-out", 1)["sub/result.txt"], "42\n");
  EXPECT_EQ(server_.Metrics("j-out", 1), "{\"loss\":1}\n");  // never half a line
  int attempt = 0;
  std::string checkpoint = server_.Checkpoint("j-out", &attempt);
  EXPECT_FALSE(checkpoint.empty()) << "a failed attempt may be retried from it";
  EXPECT_EQ(attempt, 1);
  EXPECT_EQ(Exited("j-out").exit_code, 1);
}

TEST_F(JobRunnerTest, AResumedAttemptStartsFromTheServersCheckpoint) {
  fs::create_directories(dir_ + "/ckpt");
  std::ofstream(dir_ + "/ckpt/step") << "200\n";
  auto archive = PackDirectory(dir_ + "/ckpt");
  ASSERT_TRUE(archive.ok());
  server_.SetCheckpoint("j-resume", *archive);
  api::Job spec = MakeJob("j-resume");
  spec.attempt = 2;
  spec.checkpoint_attempt = 1;
  Start(spec);
  auto job = Started();
  auto step = ReadFile(job->spec().env.at("TIDE_CHECKPOINT_DIR") + "/step");
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(*step, "200\n");
  EXPECT_EQ(job->spec().env.at("TIDE_RESUMED"), "1");
  job->Exit({0, 0});
  ASSERT_TRUE(WaitDone());
  EXPECT_EQ(server_.Log("j-resume", 2), "tide: restored the checkpoint of attempt 1\n");
}

TEST_F(JobRunnerTest, CodeIsFetchedAndUnpackedBeforeTheStart) {
  fs::create_directories(dir_ + "/code");
  std::ofstream(dir_ + "/code/run.sh") << "echo hi\n";
  auto archive = PackDirectory(dir_ + "/code");
  ASSERT_TRUE(archive.ok());
  server_.SetCode("j-code", *archive);
  api::Job spec = MakeJob("j-code");
  spec.spec.code = std::string(64, 'c');
  Start(spec);
  auto job = Started();
  EXPECT_TRUE(fs::exists(job->spec().work_dir + "/run.sh"));
  job->Exit({0, 0});
  ASSERT_TRUE(WaitDone());
}

TEST_F(JobRunnerTest, ASlurmJobFindsSrunFirstOnItsPath) {
  api::Job spec = MakeJob("j-srun");
  spec.spec.slurm = true;
  Start(spec);
  auto job = Started();
  const std::string bin = dir_ + "/jobs/j-srun/1/control/bin";
  EXPECT_EQ(job->spec().env.at("PATH").rfind(bin + ":", 0), 0u) << job->spec().env.at("PATH");
  struct stat st {};
  ASSERT_EQ(::stat((bin + "/srun").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  EXPECT_EQ(*ReadFile(bin + "/srun"), SrunScript());
  // Readable to the job, under its control directory, not in its code.
  EXPECT_NE(std::find(job->spec().readable.begin(), job->spec().readable.end(),
                      dir_ + "/jobs/j-srun/1/control"),
            job->spec().readable.end());
  job->Exit({0, 0});
  ASSERT_TRUE(WaitDone());

  Start(MakeJob("j-plain"));
  auto plain = runtime_.WaitStarted(1);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->spec().env.count("PATH"), 0u) << "only Slurm jobs get srun";
  EXPECT_FALSE(fs::exists(dir_ + "/jobs/j-plain/1/control/bin"));
  plain->Exit({0, 0});
  ASSERT_TRUE(WaitDone());
}

TEST_F(JobRunnerTest, AbandonKillsAtOnceAndReportsNothingMore) {
  server_.SetDown(true);
  Start(MakeJob("j-abandon"));
  auto job = Started();
  runner_->Abandon();
  ASSERT_TRUE(WaitDone());
  EXPECT_TRUE(runner_->process_finished());
  EXPECT_GE(job->kill_trees(), 1);
  server_.SetDown(false);
  EXPECT_TRUE(server_.Events("j-abandon").empty());
}

}  // namespace
}  // namespace tide::agent
