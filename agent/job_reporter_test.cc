// JobReporter alone: an attempt's state set by the test in place of the
// control thread, a FakeServer in place of the server.
#include "agent/job_reporter.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/testing/fake_server.h"

namespace tide::agent {
namespace {

namespace fs = std::filesystem;
using testing::FakeServer;

class JobReporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tide-reporter-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    job_.id = "j-1";
    job_.attempt = 1;
    paths_ = PathsFor(dir_, job_.id, job_.attempt);
    for (const auto& d : {paths_.work, paths_.output, paths_.checkpoint, paths_.control}) {
      fs::create_directories(d);
    }
    state_.log_fd = ::open(paths_.log.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    ASSERT_GE(state_.log_fd, 0);
    deps_.server = &server_;
    deps_.min_backoff_ms = 10;
    deps_.max_backoff_ms = 50;
    deps_.ship_interval_ms = 20;
  }
  void TearDown() override {
    if (thread_.joinable()) thread_.join();
    ::close(state_.log_fd);
    fs::remove_all(dir_);
  }

  void Run() {
    thread_ = std::thread([this] { reporter_.Run(); });
  }
  // What the control thread does as the job writes.
  void JobWrites(const std::string& text) {
    ASSERT_EQ(::write(state_.log_fd, text.data(), text.size()),
              static_cast<ssize_t>(text.size()));
    state_.log_written += static_cast<int64_t>(text.size());
  }
  void Started() {
    std::lock_guard<std::mutex> lock(state_.mu);
    state_.started = true;
    state_.cv.notify_all();
  }
  void Ended(api::JobEvent outcome) {
    state_.process_finished = true;
    std::lock_guard<std::mutex> lock(state_.mu);
    state_.outcome = std::move(outcome);
    state_.outcome_ready = true;
    state_.cv.notify_all();
  }
  static api::JobEvent ExitedWith(int code, const std::string& reason = "") {
    api::JobEvent e;
    e.attempt = 1;
    e.state = "exited";
    e.exit_code = code;
    e.reason = reason;
    return e;
  }
  bool WaitDone() {
    return FakeServer::WaitFor([&] { return state_.done.load(); });
  }

  std::string dir_;
  api::Job job_;
  JobPaths paths_;
  FakeServer server_;
  RunnerDeps deps_;
  AttemptState state_;
  JobReporter reporter_{job_, paths_, deps_, &state_};
  std::thread thread_;
};

TEST_F(JobReporterTest, ReportsRunningTheLogTheOutputsAndTheExitInOrder) {
  Run();
  Started();
  ASSERT_TRUE(FakeServer::WaitFor([&] { return server_.Events("j-1").size() == 1; }));
  EXPECT_EQ(server_.Events("j-1")[0].state, "running");
  JobWrites("one\n");
  ASSERT_TRUE(FakeServer::WaitFor([&] { return server_.Log("j-1", 1) == "one\n"; }));
  JobWrites("two\n");
  std::ofstream(paths_.output + "/r.txt") << "r";
  server_.FailEvents(3);  // the exit report is retried until acknowledged
  Ended(ExitedWith(0));
  ASSERT_TRUE(WaitDone());
  auto events = server_.Events("j-1");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].state, "exited");
  EXPECT_EQ(events[1].exit_code, 0);
  EXPECT_EQ(server_.Log("j-1", 1), "one\ntwo\n");
  EXPECT_EQ(server_.Outputs("j-1", 1)["r.txt"], "r");
  EXPECT_TRUE(server_.Checkpoint("j-1").empty());  // an empty checkpoint/ is not sent
  EXPECT_TRUE(state_.wipe.load()) << "acknowledged: the runner may delete the attempt";
}

TEST_F(JobReporterTest, AnAttemptThatNeverStartedOnlyReportsItsExit) {
  Run();
  JobWrites("tide: start failed: no\n");
  Ended(ExitedWith(0, "start_failed"));
  ASSERT_TRUE(WaitDone());
  auto events = server_.Events("j-1");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].reason, "start_failed");
  EXPECT_EQ(server_.Log("j-1", 1), "tide: start failed: no\n");
}

TEST_F(JobReporterTest, ALogGapStopsTheLogNotTheReport) {
  Run();
  Started();
  JobWrites("one\n");
  ASSERT_TRUE(FakeServer::WaitFor([&] { return server_.Log("j-1", 1) == "one\n"; }));
  server_.LoseLog("j-1", 1);  // the next post (offset 4) is a gap: kConflict
  JobWrites("two\n");
  Ended(ExitedWith(0));
  ASSERT_TRUE(WaitDone());
  EXPECT_EQ(server_.Log("j-1", 1), "");
  EXPECT_FALSE(state_.rejected.load());
  ASSERT_EQ(server_.Events("j-1").size(), 2u);
}

TEST_F(JobReporterTest, ARejectionOrdersAStopAtOnce) {
  Run();
  server_.RejectJob("j-1");
  Started();  // "running" is refused: 404
  ASSERT_TRUE(FakeServer::WaitFor([&] { return state_.rejected.load(); }));
  {
    std::lock_guard<std::mutex> lock(state_.mu);
    EXPECT_TRUE(state_.stop_ordered);
    EXPECT_EQ(state_.stop_reason, "rejected");
    EXPECT_EQ(state_.stop_grace_s, 0);
  }
  Ended(ExitedWith(137, "rejected"));
  ASSERT_TRUE(WaitDone());
  EXPECT_TRUE(server_.Events("j-1").empty());
}

}  // namespace
}  // namespace tide::agent
