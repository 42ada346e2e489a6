#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/runtime/process_runtime.h"
#include "agent/runtime/process_tree.h"
#include "common/paths.h"

namespace tide::agent {
namespace {

namespace fs = std::filesystem;

class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tide-runtime-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  LaunchSpec Shell(const std::string& script) {
    LaunchSpec spec;
    spec.argv = {"sh", "-c", script};
    spec.work_dir = dir_;
    tag_ = "TIDE_JOB_ID=test-" + std::to_string(getpid()) + "-" + std::to_string(++counter_);
    spec.env = {{"TIDE_JOB_ID", tag_.substr(strlen("TIDE_JOB_ID="))}};
    spec.tag = {tag_};
    return spec;
  }

  // Reads the pipe until EOF or `timeout_ms`.
  static std::string ReadAll(int fd, int timeout_ms = 10'000) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      ssize_t n = read(fd, buf, sizeof buf);
      if (n == 0) break;
      if (n > 0) out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

  // Waits until `path` has `lines` lines.
  static std::vector<pid_t> WaitForPids(const std::string& path, size_t lines) {
    for (int i = 0; i < 500; ++i) {
      std::ifstream in(path);
      std::vector<pid_t> pids;
      long v;
      while (in >> v) pids.push_back(static_cast<pid_t>(v));
      if (pids.size() >= lines) return pids;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return {};
  }

  static std::string DescribeChildren() {
    std::string out;
    for (pid_t kid : ListOwnChildren()) {
      out += ReadFile("/proc/" + std::to_string(kid) + "/stat").value().substr(0, 60) + "\n";
    }
    return out;
  }

  static bool Exists(pid_t pid) { return fs::exists("/proc/" + std::to_string(pid)); }

  ProcessRuntime runtime_;
  std::string dir_;
  std::string tag_;
  int counter_ = 0;
};

TEST_F(RuntimeTest, CapturesOutputAndExitCode) {
  auto p = runtime_.Start(Shell("echo out; echo err >&2; exit 3"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(ReadAll((*p)->output_fd()), "out\nerr\n");
  auto e = (*p)->Wait(10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 3);
  EXPECT_EQ(e->signal, 0);
  EXPECT_EQ(e->ShellCode(), 3);
  EXPECT_TRUE((*p)->KillTree().ok());
  EXPECT_FALSE(Exists((*p)->pid()));
}

TEST_F(RuntimeTest, ReportsDeathBySignal) {
  auto p = runtime_.Start(Shell("kill -SEGV $$"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto e = (*p)->Wait(10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->signal, SIGSEGV);
  EXPECT_EQ(e->ShellCode(), 128 + SIGSEGV);
  EXPECT_NE(e->ToString().find("signal 11"), std::string::npos);
}

TEST_F(RuntimeTest, EnvironmentIsClean) {
  setenv("TIDE_AGENT_SECRET", "must-not-leak", 1);
  LaunchSpec spec;
  spec.argv = {"env"};
  spec.work_dir = dir_;
  spec.env = {{"FOO", "bar baz"}, {"LANG", "de_DE.UTF-8"}};
  auto p = runtime_.Start(spec);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::string out = ReadAll((*p)->output_fd());
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  std::vector<std::string> want = {"FOO=bar baz", "HOME=" + dir_, "LANG=de_DE.UTF-8",
                                   std::string("PATH=") + kDefaultPath};
  EXPECT_EQ(lines, want) << out;
  unsetenv("TIDE_AGENT_SECRET");
}

TEST_F(RuntimeTest, RunsInWorkDirWithStdinFromDevNullAndOwnSession) {
  std::ofstream(dir_ + "/run.sh") << "#!/bin/sh\npwd\ncat\nps -o sid= -p $$ | tr -d ' '\n"
                                     "echo $$\n";
  chmod((dir_ + "/run.sh").c_str(), 0755);
  LaunchSpec spec;
  spec.argv = {"./run.sh"};
  spec.work_dir = dir_;
  auto p = runtime_.Start(spec);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::string out = ReadAll((*p)->output_fd());
  std::string pid = std::to_string((*p)->pid());
  EXPECT_EQ(out, dir_ + "\n" + pid + "\n" + pid + "\n");
  auto e = (*p)->Wait(10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0);
}

TEST_F(RuntimeTest, WritesToCallersFd) {
  std::string log = dir_ + "/log";
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  LaunchSpec spec = Shell("echo to-file");
  spec.output_fd = fd;
  auto p = runtime_.Start(spec);
  close(fd);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->output_fd(), -1);
  ASSERT_TRUE((*p)->Wait(10'000).has_value());
  EXPECT_EQ(*ReadFile(log), "to-file\n");
}

TEST_F(RuntimeTest, StartFailuresAreClearErrors) {
  LaunchSpec spec;
  spec.work_dir = dir_;
  spec.argv = {"no-such-command-xyz"};
  auto p = runtime_.Start(spec);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("command not found"), std::string::npos)
      << p.status().ToString();

  std::ofstream(dir_ + "/data.txt") << "not a program\n";
  spec.argv = {"./data.txt"};
  p = runtime_.Start(spec);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("not an executable"), std::string::npos);

  spec.argv = {"true"};
  spec.work_dir = dir_ + "/missing";
  p = runtime_.Start(spec);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("does not exist"), std::string::npos);

  // Exec itself fails: a file marked executable that is not a valid program.
  std::ofstream(dir_ + "/bad.bin") << std::string(
      "\x7f"
      "ELF garbage",
      12);
  chmod((dir_ + "/bad.bin").c_str(), 0755);
  spec.work_dir = dir_;
  spec.argv = {"./bad.bin"};
  p = runtime_.Start(spec);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("cannot execute"), std::string::npos)
      << p.status().ToString();
}

TEST_F(RuntimeTest, SignalReachesTheJob) {
  auto p = runtime_.Start(
      Shell("trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  int fd = (*p)->output_fd();
  std::string out;
  for (int i = 0; i < 200 && out.find("ready") == std::string::npos; ++i) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, 50) > 0) {
      char buf[256];
      ssize_t n = read(fd, buf, sizeof buf);
      if (n > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  ASSERT_NE(out.find("ready"), std::string::npos);
  ASSERT_TRUE((*p)->Signal(SIGTERM).ok());
  auto e = (*p)->Wait(10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 7);
  EXPECT_NE(ReadAll(fd).find("got-term"), std::string::npos);
}

// The job leaves behind: a background child, a child in its own session,
// and an orphan in its own session whose parent already exited (reparented
// to us as subreaper). KillTree must end them all and leave no zombie.
TEST_F(RuntimeTest, KillTreeLeavesNothingBehind) {
  std::string pids = dir_ + "/pids";
  auto p =
      runtime_.Start(Shell("sleep 300 & echo $! >> pids; "
                           "setsid sleep 300 & echo $! >> pids; "
                           "setsid sh -c 'sleep 300 & echo $! >> pids' ; "
                           "sh -c 'setsid sleep 300 & echo $! >> pids'; "
                           "exec sleep 300"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::vector<pid_t> leftovers = WaitForPids(pids, 4);
  ASSERT_EQ(leftovers.size(), 4u);
  for (pid_t pid : leftovers) EXPECT_TRUE(Exists(pid)) << pid;
  EXPECT_FALSE((*p)->Poll().has_value());

  // A process in the middle of an exec may be missed by one look at /proc
  // (its environ is unreadable for that moment): the next look finds it.
  size_t members = 0;
  for (int i = 0; i < 100 && members < 5; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    members = FindJobProcesses(ListProcesses(), (*p)->pid(), {tag_}, getpid()).size();
  }
  EXPECT_GE(members, 5u);

  ASSERT_TRUE((*p)->KillTree().ok());
  for (pid_t pid : leftovers) {
    EXPECT_FALSE(Exists(pid)) << pid << " survived: "
                              << ReadFile("/proc/" + std::to_string(pid) + "/stat").value();
  }
  EXPECT_FALSE(Exists((*p)->pid()));
  auto e = (*p)->Poll();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_TRUE(ListOwnChildren().empty()) << DescribeChildren();
}

// The main process exits normally; its leftovers die with KillTree.
TEST_F(RuntimeTest, LeftoversDieAfterNormalExit) {
  auto p = runtime_.Start(Shell("setsid sleep 300 & echo $! > pids; sleep 300 & exit 0"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto e = (*p)->Wait(10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0);
  std::vector<pid_t> leftovers = WaitForPids(dir_ + "/pids", 1);
  ASSERT_EQ(leftovers.size(), 1u);
  EXPECT_TRUE(Exists(leftovers[0]));
  ASSERT_TRUE((*p)->KillTree().ok());
  EXPECT_FALSE(Exists(leftovers[0]));
  EXPECT_EQ((*p)->Poll()->exit_code, 0);  // the real exit status is kept
  EXPECT_TRUE(ListOwnChildren().empty()) << DescribeChildren();
}

// Orphans that exit on their own while the job runs are reaped.
TEST_F(RuntimeTest, ReapsExitedOrphans) {
  auto p = runtime_.Start(Shell("sh -c 'sleep 0.2 & exit 0'; sleep 300"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  runtime_.ReapOrphans();  // sees the orphan alive and adopts it
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  runtime_.ReapOrphans();  // reaps its zombie
  std::vector<pid_t> kids = ListOwnChildren();
  EXPECT_EQ(kids, std::vector<pid_t>{(*p)->pid()});
  ASSERT_TRUE((*p)->KillTree().ok());
}

TEST(ProcStatTest, ParsesCommWithSpacesAndParens) {
  ProcInfo info;
  ASSERT_TRUE(ParseProcStat("123 (a b) c)) S 45 67 89 0 -1", &info));
  EXPECT_EQ(info.pid, 123);
  EXPECT_EQ(info.state, 'S');
  EXPECT_EQ(info.ppid, 45);
  EXPECT_EQ(info.pgrp, 67);
  EXPECT_EQ(info.session, 89);
  EXPECT_FALSE(ParseProcStat("garbage", &info));
}

}  // namespace
}  // namespace tide::agent
