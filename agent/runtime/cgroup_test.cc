#include "agent/runtime/cgroup.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/runtime/process_runtime.h"
#include "common/paths.h"

namespace tide::agent {
namespace {

namespace fs = std::filesystem;

std::string Read(const std::string& path) {
  auto t = ReadFile(path);
  return t.ok() ? *t : "";
}
void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

class FakeTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("tide-cgroup-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ + "/proc");
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string root_;
};

TEST_F(FakeTree, AHybridHostUsesV1ForLimitsAndTheBareV2TreeForKilling) {
  // As on Debian VMs without systemd's unified layout.
  Write(root_ + "/proc/mountinfo",
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
        "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
  Write(root_ + "/proc/cgroup", "8:pids:/\n6:freezer:/\n4:memory:/box/7\n1:cpu:/\n0::/\n");
  Write(root_ + "/sys/fs/cgroup/unified/cgroup.controllers", "");
  auto layout = DetectCgroups(root_ + "/proc", root_);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_FALSE(layout->v2_limits());
  EXPECT_EQ(layout->v2_dir, root_ + "/sys/fs/cgroup/unified");
  EXPECT_EQ(layout->v1_dirs.at("memory"), root_ + "/sys/fs/cgroup/memory/box/7");
  EXPECT_EQ(layout->v1_dirs.at("pids"), root_ + "/sys/fs/cgroup/pids");
  EXPECT_NE(layout->Describe().find("hybrid"), std::string::npos);
  for (const auto& [c, d] : layout->v1_dirs) fs::create_directories(d);
  // An old kernel's default: children may ignore the agent's memory limit.
  Write(root_ + "/sys/fs/cgroup/memory/box/7/tide-agent/memory.use_hierarchy", "0");

  auto m = CgroupManager::Create(*layout, "tide-agent");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(Read(root_ + "/sys/fs/cgroup/memory/box/7/tide-agent/memory.use_hierarchy"), "1");
  auto job = (*m)->CreateJob("j-1.1", {512 << 20, 1.5, 100});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string mem = root_ + "/sys/fs/cgroup/memory/box/7/tide-agent/j-1.1";
  EXPECT_EQ(Read(mem + "/memory.limit_in_bytes"), "536870912");
  EXPECT_EQ(Read(root_ + "/sys/fs/cgroup/cpu/tide-agent/j-1.1/cpu.cfs_quota_us"), "150000");
  EXPECT_EQ(Read(root_ + "/sys/fs/cgroup/cpu/tide-agent/j-1.1/cpu.cfs_period_us"), "100000");
  EXPECT_EQ(Read(root_ + "/sys/fs/cgroup/pids/tide-agent/j-1.1/pids.max"), "100");
  EXPECT_EQ((*job)->dirs().size(), 5u);  // v2 + memory, cpu, pids, freezer
  ASSERT_TRUE((*job)->Add(4242).ok());
  EXPECT_EQ(Read(root_ + "/sys/fs/cgroup/unified/tide-agent/j-1.1/cgroup.procs"), "4242");
  Write(mem + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
  EXPECT_TRUE((*job)->OomKilled());
  Write(root_ + "/sys/fs/cgroup/cpu/tide-agent/j-1.1/cpu.stat",
        "nr_periods 40\nnr_throttled 31\nthrottled_time 2500000000\n");
  auto t = (*job)->Throttling();
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->throttled, 31);
  EXPECT_EQ(t->throttled_usec, 2'500'000);
  // Nothing outside the agent's own subtree was written.
  EXPECT_FALSE(fs::exists(root_ + "/sys/fs/cgroup/memory/box/7/memory.limit_in_bytes"));
  EXPECT_FALSE(fs::exists(root_ + "/sys/fs/cgroup/unified/cgroup.subtree_control"));
  Write(root_ + "/sys/fs/cgroup/unified/tide-agent/j-1.1/cgroup.procs", "");
}

TEST_F(FakeTree, APureV2HostDelegatesControllersAndKillsWithCgroupKill) {
  Write(root_ + "/proc/mountinfo", "25 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n");
  Write(root_ + "/proc/cgroup", "0::/system.slice/tide-agent.service\n");
  const std::string own = root_ + "/sys/fs/cgroup/system.slice/tide-agent.service";
  Write(own + "/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma\n");
  auto layout = DetectCgroups(root_ + "/proc", root_);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_TRUE(layout->v2_limits());
  EXPECT_TRUE(layout->v1_dirs.empty());
  EXPECT_NE(layout->Describe().find("cgroup v2"), std::string::npos);

  auto m = CgroupManager::Create(*layout, "jobs");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // The agent moved into a leaf so that its cgroup may delegate.
  EXPECT_EQ(Read(own + "/jobs/agent/cgroup.procs"), std::to_string(::getpid()));
  EXPECT_EQ(Read(own + "/cgroup.subtree_control"), "+memory +cpu +pids");
  EXPECT_EQ(Read(own + "/jobs/cgroup.subtree_control"), "+memory +cpu +pids");

  const std::string dir = own + "/jobs/j-2.1";
  Write(dir + "/memory.swap.max", "max");
  Write(dir + "/cgroup.kill", "");
  auto job = (*m)->CreateJob("j-2.1", {1 << 30, 0.5, 0});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(Read(dir + "/memory.max"), "1073741824");
  EXPECT_EQ(Read(dir + "/memory.swap.max"), "0");
  EXPECT_EQ(Read(dir + "/cpu.max"), "50000 100000");
  EXPECT_EQ(Read(dir + "/pids.max"), "max");
  EXPECT_EQ((*job)->dirs(), std::vector<std::string>{dir});
  Write(dir + "/memory.events", "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n");
  EXPECT_TRUE((*job)->OomKilled());
  Write(dir + "/cpu.stat", "usage_usec 9\nnr_periods 10\nnr_throttled 7\nthrottled_usec 350000\n");
  EXPECT_EQ((*job)->Throttling()->throttled_usec, 350'000);

  // Kill writes cgroup.kill; the "kernel" here empties the cgroup.
  Write(dir + "/cgroup.procs", "101\n102\n");
  std::thread kernel([&] {
    for (int i = 0; i < 400 && Read(dir + "/cgroup.kill") != "1"; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    Write(dir + "/cgroup.procs", "");
  });
  EXPECT_TRUE((*job)->Kill().ok());
  kernel.join();
  EXPECT_EQ(Read(dir + "/cgroup.kill"), "1");
  EXPECT_TRUE((*job)->Pids().empty());
}

TEST_F(FakeTree, AV2HostDelegatingSomeControllersUsesThoseAndSaysWhichAreMissing) {
  Write(root_ + "/proc/mountinfo", "25 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n");
  Write(root_ + "/proc/cgroup", "0::/system.slice/tide-agent.service\n");
  const std::string own = root_ + "/sys/fs/cgroup/system.slice/tide-agent.service";
  Write(own + "/cgroup.controllers", "memory pids\n");  // no cpu
  auto layout = DetectCgroups(root_ + "/proc", root_);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_TRUE(layout->v2_limits());
  EXPECT_EQ(layout->v2_limit_controllers(), (std::vector<std::string>{"memory", "pids"}));
  EXPECT_NE(layout->Describe().find("not delegated to the agent: cpu"), std::string::npos)
      << layout->Describe();
  auto m = CgroupManager::Create(*layout, "jobs");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(Read(own + "/cgroup.subtree_control"), "+memory +pids");
  EXPECT_EQ((*m)->V2Path("j-3.1"), "/system.slice/tide-agent.service/jobs/j-3.1");
  auto job = (*m)->CreateJob("j-3.1", {1 << 30, 0.5, 64});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string dir = own + "/jobs/j-3.1";
  EXPECT_EQ(Read(dir + "/memory.max"), "1073741824");
  EXPECT_EQ(Read(dir + "/pids.max"), "64");
  EXPECT_FALSE(fs::exists(dir + "/cpu.max"));  // the kernel would refuse it
  Write(own + "/jobs/agent/cgroup.procs", "");
}

TEST_F(FakeTree, AV1CpuQuotaIsCappedAtTheAgentsOwn) {
  Write(root_ + "/proc/mountinfo",
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n");
  Write(root_ + "/proc/cgroup", "1:cpu:/limited\n");
  const std::string own = root_ + "/sys/fs/cgroup/cpu/limited";
  Write(own + "/cpu.cfs_quota_us", "150000\n");  // 0.5 CPU at a 300 ms period
  Write(own + "/cpu.cfs_period_us", "300000\n");
  auto layout = DetectCgroups(root_ + "/proc", root_);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  auto m = CgroupManager::Create(*layout, "tide-agent");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Write(own + "/tide-agent/cpu.cfs_quota_us", "-1\n");
  Write(own + "/tide-agent/cpu.cfs_period_us", "100000\n");
  auto job = (*m)->CreateJob("j-1.1", {0, 4, 0});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(Read(own + "/tide-agent/j-1.1/cpu.cfs_quota_us"), "50000");
  auto small = (*m)->CreateJob("j-2.1", {0, 0.25, 0});
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(Read(own + "/tide-agent/j-2.1/cpu.cfs_quota_us"), "25000");  // under the cap: as asked
}

TEST_F(FakeTree, AContainersMountRootIsNotCountedTwice) {
  // A container without its own cgroup namespace sees the host's path.
  Write(root_ + "/proc/mountinfo",
        "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  Write(root_ + "/proc/cgroup", "4:memory:/docker/abc/sub\n");
  auto layout = DetectCgroups(root_ + "/proc", root_);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->v1_dirs.at("memory"), root_ + "/sys/fs/cgroup/memory/sub");
}

TEST_F(FakeTree, AV2AgentThatSharesItsCgroupDoesNotMoveAnything) {
  Write(root_ + "/proc/mountinfo", "25 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  Write(root_ + "/proc/cgroup", "0::/user.slice/session-1.scope\n");
  const std::string own = root_ + "/sys/fs/cgroup/user.slice/session-1.scope";
  Write(own + "/cgroup.controllers", "cpu memory pids\n");
  Write(own + "/cgroup.procs", "1\n" + std::to_string(::getpid()) + "\n");
  auto layout = DetectCgroups(root_ + "/proc", root_);
  ASSERT_TRUE(layout.ok());
  auto m = CgroupManager::Create(*layout, "tide-agent-1");
  EXPECT_EQ(m.status().code(), Code::kUnavailable) << m.status().ToString();
  EXPECT_FALSE(fs::exists(own + "/tide-agent-1"));
  EXPECT_FALSE(fs::exists(own + "/cgroup.subtree_control"));
}

TEST_F(FakeTree, NoHierarchyIsAClearError) {
  Write(root_ + "/proc/mountinfo", "22 1 0:20 / / rw - ext4 /dev/sda1 rw\n");
  Write(root_ + "/proc/cgroup", "");
  auto layout = DetectCgroups(root_ + "/proc", root_);
  EXPECT_EQ(layout.status().code(), Code::kUnavailable);
  EXPECT_FALSE(CgroupManager::Create(CgroupLayout{}, "../escape").ok());
}

// On this host, for real (root on the machines CI runs on).
class HostCgroups : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to make cgroups";
    auto layout = DetectCgroups();
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    auto m = CgroupManager::Create(*layout, "tide-test-" + std::to_string(::getpid()));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    manager_ = std::move(m).value();
  }
  // Starts `sh -c script` inside `job`: the child waits on a pipe until it
  // is in the cgroup, so none of its children start outside.
  pid_t StartIn(JobCgroup& job, const std::string& script) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[1]);
      char c;
      (void)::read(p[0], &c, 1);
      ::execl("/bin/sh", "sh", "-c", script.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(p[0]);
    EXPECT_TRUE(job.Add(pid).ok());
    (void)::write(p[1], "x", 1);
    ::close(p[1]);
    return pid;
  }
  std::unique_ptr<CgroupManager> manager_;
};

TEST_F(HostCgroups, KillEndsEveryProcessEvenThoseThatLeftTheSession) {
  auto job = manager_->CreateJob("kill", {256 << 20, 0, 64});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  pid_t pid = StartIn(**job, "sleep 60 & setsid sh -c 'sleep 60 & sleep 60' & exec sleep 60");
  ASSERT_TRUE([&] {
    for (int i = 0; i < 200; ++i) {
      if ((*job)->Pids().size() >= 4) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }());
  std::vector<pid_t> members = (*job)->Pids();
  ASSERT_TRUE((*job)->Kill().ok());
  EXPECT_TRUE((*job)->Pids().empty());
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status));
  for (pid_t m : members) {
    if (m != pid) {
      // Gone, or a zombie waiting for whoever inherited it.
      std::string stat = Read("/proc/" + std::to_string(m) + "/stat");
      size_t close = stat.rfind(')');
      char state = close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : 'X';
      EXPECT_TRUE(state == 'X' || state == 'Z') << "pid " << m << " survived: " << stat;
    }
  }
}

TEST_F(HostCgroups, AJobThatMovesIntoASubCgroupIsStillKilled) {
  auto job = manager_->CreateJob("escape", {0, 0, 64});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string dir = (*job)->dirs().front();
  pid_t pid = StartIn(**job, "mkdir " + dir + "/away && echo $$ > " + dir +
                                 "/away/cgroup.procs && sleep 60 & exec sleep 60");
  ASSERT_TRUE([&] {
    for (int i = 0; i < 200; ++i) {
      if (!Read(dir + "/away/cgroup.procs").empty()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }());
  ASSERT_TRUE((*job)->Kill().ok());
  EXPECT_TRUE((*job)->Pids().empty());
  ::waitpid(pid, nullptr, 0);
  job->reset();
  EXPECT_FALSE(fs::exists(dir)) << "removed, sub-cgroup and all";
}

TEST_F(HostCgroups, WhatADeadAgentLeftRunningIsKilledAtTheNextStart) {
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  auto layout = DetectCgroups();
  ASSERT_TRUE(layout.ok());
  const std::string name = "tide-agent-" + std::to_string(dead) + "-3";
  auto old = CgroupManager::Create(*layout, name);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  // A running agent's subtree stays, whichever agent of its process it is.
  auto live = CgroupManager::Create(*layout, "tide-agent-" + std::to_string(::getpid()) + "-9");
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  auto running = (*live)->CreateJob("running", {0, 0, 64});
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  auto job = (*old)->CreateJob("left", {0, 0, 64});
  ASSERT_TRUE(job.ok());
  JobCgroup* leaked = job->release();  // as if its agent died: nobody kills it
  pid_t pid = StartIn(*leaked, "exec sleep 60");
  std::vector<std::string> dirs = leaked->dirs();
  old->reset();
  CgroupManager::RemoveStale(*layout, "tide-agent-");
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  for (const auto& d : dirs) EXPECT_FALSE(fs::exists(d)) << d;
  delete leaked;  // its processes and directories are gone already
  for (const auto& d : (*running)->dirs()) EXPECT_TRUE(fs::exists(d)) << d;
}

// The process runtime with cgroups: the job's first process joins its
// cgroup before it execs. A job in a uid of its own cannot leave the
// cgroup, so a kill through it shows the whole tree gone, escapees from the
// session included, without a look at /proc; a job of the agent's own uid
// could have moved itself out, and is hunted through /proc as well.
TEST_F(HostCgroups, AJobStartedInItsCgroupIsKilledThroughIt) {
  ProcessRuntime runtime;
  runtime.set_cgroups(manager_.get());
  char tmpl[] = "/tmp/tide-cgroup-runtime-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  ::chmod(tmpl, 0777);
  const std::string group = "tide-test-" + std::to_string(::getpid());
  // The sleeps of this test's jobs, by their cgroup.
  auto sleeps = [&] {
    std::vector<pid_t> out;
    for (const auto& e : fs::directory_iterator("/proc")) {
      std::string name = e.path().filename();
      if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
      if (Read(e.path().string() + "/comm") == "sleep\n" &&
          Read(e.path().string() + "/cgroup").find(group) != std::string::npos) {
        out.push_back(std::stoi(name));
      }
    }
    return out;
  };
  for (const int64_t uid : {int64_t{3000000020}, int64_t{-1}}) {
    SCOPED_TRACE(uid < 0 ? "the agent's uid" : "a uid of its own");
    const std::string where = std::string(tmpl) + "/where" + std::to_string(uid);
    LaunchSpec spec;
    spec.argv = {"sh", "-c",
                 "cat /proc/self/cgroup > " + where + ".tmp && mv " + where + ".tmp " + where +
                     "; setsid sh -c 'sleep 60 & sleep 60' & (sh -c 'sleep 60 &' &); exec sleep 60"};
    spec.work_dir = tmpl;
    spec.cgroup_key = "contained";
    spec.limits = {0, 0, 64};
    spec.uid = uid;
    spec.gid = uid;
    auto p = runtime.Start(spec);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_GE((*p)->exit_fd(), 0);    // a pidfd on this kernel
    EXPECT_FALSE((*p)->Contained());  // not before a kill has shown it
    ASSERT_TRUE([&] {
      for (int i = 0; i < 300; ++i) {
        if (fs::exists(where) && sleeps().size() >= 4) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return false;
    }()) << sleeps().size() << " sleeps";
    EXPECT_NE(Read(where).find(group), std::string::npos) << Read(where);
    std::vector<pid_t> before = sleeps();
    ASSERT_TRUE((*p)->KillTree().ok());
    EXPECT_EQ((*p)->Contained(), uid >= 0);
    for (pid_t s : before) {
      // Gone, or a zombie of whoever inherited it (not this test).
      std::string stat = Read("/proc/" + std::to_string(s) + "/stat");
      size_t close = stat.rfind(')');
      char state = close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : 'X';
      EXPECT_TRUE(state == 'X' || state == 'Z') << s << " survived: " << stat;
    }
    auto e = (*p)->Poll();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->signal, SIGKILL);
  }
  fs::remove_all(tmpl);
}

TEST_F(HostCgroups, MemoryPastTheLimitIsAnOomKillOfTheJobOnly) {
  auto job = manager_->CreateJob("oom", {64 << 20, 0, 64});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  pid_t pid = StartIn(**job, "exec python3 -c 'a = bytearray(512 << 20); print(len(a))'");
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_TRUE((*job)->OomKilled());
}

TEST_F(HostCgroups, AFifthOfACpuIsThrottled) {
  auto job = manager_->CreateJob("cpu", {0, 0.2, 0});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  pid_t pid = StartIn(**job, "while :; do :; done");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto t = (*job)->Throttling();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_GT(t->throttled, 0);
  EXPECT_GT(t->throttled_usec, 0);
  ASSERT_TRUE((*job)->Kill().ok());
  ::waitpid(pid, nullptr, 0);
}

}  // namespace
}  // namespace tide::agent
