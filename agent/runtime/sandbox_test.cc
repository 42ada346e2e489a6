#include "agent/runtime/sandbox.h"

#include <arpa/inet.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/runtime/cgroup.h"
#include "agent/runtime/process_tree.h"
#include "agent/testing/job_spec.h"
#include "common/paths.h"

namespace tide::agent {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& what) {
  std::string tmpl = "/tmp/tide-" + what + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

bool Has(const std::vector<std::string>& args, const std::vector<std::string>& seq) {
  return std::search(args.begin(), args.end(), seq.begin(), seq.end()) != args.end();
}
size_t IndexOf(const std::vector<std::string>& args, const std::vector<std::string>& seq) {
  return static_cast<size_t>(std::search(args.begin(), args.end(), seq.begin(), seq.end()) -
                             args.begin());
}

// ---------------------------------------------------------------- uid range

TEST(UidRangeTest, ParsesAndRefusesWhatCannotBeAJobUid) {
  std::string dir = TempDir("uids");
  std::ofstream(dir + "/passwd") << "root:x:0:0::/root:/bin/sh\n"
                                    "alice:x:1000:1000::/home/alice:/bin/sh\n"
                                    "broken line\n"
                                    "svc:x:2000000500:2000000500::/:/bin/false\n";
  std::ofstream(dir + "/group") << "root:x:0:\nvideo:x:44:alice\ngpu:x:3000000007:\n";
  auto r = ParseUidRange("100000-165535", dir + "/passwd", dir + "/group");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->first, 100000u);
  EXPECT_EQ(r->last, 165535u);
  for (const char* bad : {"", "100000", "a-b", "100000-", "-5", "5-4", "0-10", "1-99999999999",
                          "1-4294967295"}) {
    auto b = ParseUidRange(bad, dir + "/passwd", dir + "/group");
    EXPECT_FALSE(b.ok()) << bad;
    if (!b.ok()) {
      EXPECT_NE(b.status().message().find("--job-uids"), std::string::npos) << bad;
    }
  }
  auto clash = ParseUidRange("999-1001", dir + "/passwd", dir + "/group");
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find("uid 1000 of user alice"), std::string::npos)
      << clash.status().message();
  EXPECT_FALSE(ParseUidRange("2000000000-2000065535", dir + "/passwd", dir + "/group").ok());
  auto group = ParseUidRange("3000000000-3000065535", dir + "/passwd", dir + "/group");
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("gid 3000000007 of group gpu"), std::string::npos)
      << group.status().message();
  fs::remove_all(dir);
}

TEST(UidPoolTest, AgentsSharingALockDirNeverShareAUid) {
  std::string dir = TempDir("uid-locks");
  UidPool a({3000000000u, 3000000002u}, dir);
  UidPool b({3000000000u, 3000000002u}, dir);  // another agent, the same range
  auto a1 = a.Claim();
  auto b1 = b.Claim();
  auto a2 = a.Claim();
  ASSERT_TRUE(a1.ok() && b1.ok() && a2.ok());
  std::set<uid_t> held = {(*a1)->uid(), (*b1)->uid(), (*a2)->uid()};
  EXPECT_EQ(held.size(), 3u);
  auto none = b.Claim();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kUnavailable);
  EXPECT_NE(none.status().message().find("in use"), std::string::npos);
  uid_t freed = (*b1)->uid();
  b1->reset();  // the job ended
  auto again = a.Claim();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->uid(), freed);
  fs::remove_all(dir);
}

TEST(UidPoolTest, AUidLetGoOfIsTakenAgainBeforeAFreshOne) {
  // A fresh uid's new lock file means a sweep of /proc; one this pool let
  // go of is marked free and needs none.
  std::string dir = TempDir("uid-reuse");
  UidPool pool({3000000020u, 3000000029u}, dir);
  auto a = pool.Claim();
  auto b = pool.Claim();
  ASSERT_TRUE(a.ok() && b.ok());
  const uid_t first = (*a)->uid(), second = (*b)->uid();
  a->reset();
  b->reset();
  auto c = pool.Claim();
  auto d = pool.Claim();
  ASSERT_TRUE(c.ok() && d.ok());
  EXPECT_EQ((*c)->uid(), second);  // newest first
  EXPECT_EQ((*d)->uid(), first);
  auto e = pool.Claim();  // none left to reuse: the next fresh one
  ASSERT_TRUE(e.ok());
  EXPECT_NE((*e)->uid(), first);
  EXPECT_NE((*e)->uid(), second);
  fs::remove_all(dir);
}

// A process running as `uid` (a job's leftover), once it does; -1 when it
// could not start.
pid_t RunAs(uid_t uid) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 ||
        ::setresuid(uid, uid, uid) != 0) {
      ::_exit(127);
    }
    ::execl("/bin/sleep", "sleep", "60", nullptr);
    ::_exit(127);
  }
  const std::string want = "Uid:\t" + std::to_string(uid) + "\t";
  for (int i = 0; pid > 0 && i < 500; ++i) {
    auto status = ReadFile("/proc/" + std::to_string(pid) + "/status");
    if (status.ok() && status->find(want) != std::string::npos) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return -1;
}

// `pid`, a child of this test, has ended (and is reaped).
bool Ended(pid_t pid) {
  int st = 0;
  pid_t r = ::waitpid(pid, &st, WNOHANG);
  return r == pid || (r < 0 && errno == ECHILD);
}

std::string Mark(const std::string& lock) {
  auto text = ReadFile(lock);
  return text.ok() ? *text : "(" + text.status().ToString() + ")";
}

TEST(UidPoolTest, AUidIsSweptAtClaimUnlessItsLastHolderSawItEmpty) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a process as a job uid";
  std::string dir = TempDir("uid-marks");
  constexpr uid_t kUid = 3000000010u;
  const std::string lock = dir + "/" + std::to_string(kUid) + ".lock";
  UidPool pool({kUid, kUid}, dir);

  // A new lock file: whatever runs as the uid is swept before the claim.
  pid_t stray = RunAs(kUid);
  ASSERT_GT(stray, 0);
  auto first = pool.Claim();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(Ended(stray));
  EXPECT_EQ(Mark(lock), "held\n");

  // A release that did not see the uid empty sweeps it, then marks it free.
  pid_t left = RunAs(kUid);
  ASSERT_GT(left, 0);
  first->reset();
  EXPECT_TRUE(Ended(left));
  EXPECT_EQ(Mark(lock), "free\n");

  // A claim of a uid marked free does not sweep it (nothing ran as it since
  // the last holder saw it empty): a process started as it in between, by
  // something other than an agent, is still there after the claim...
  pid_t after = RunAs(kUid);
  ASSERT_GT(after, 0);
  auto second = pool.Claim();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_FALSE(Ended(after));
  EXPECT_EQ(Mark(lock), "held\n");
  // ...and a holder that says it left the uid empty releases it unswept.
  (*second)->MarkEmpty();
  second->reset();
  EXPECT_FALSE(Ended(after));
  EXPECT_EQ(Mark(lock), "free\n");
  ::kill(after, SIGKILL);
  ::waitpid(after, nullptr, 0);

  // A holder that died (an agent killed -9) never ran its release: the mark
  // stays "held" and the next claim sweeps.
  std::ofstream(lock, std::ios::trunc) << "held\n";
  pid_t orphan = RunAs(kUid);
  ASSERT_GT(orphan, 0);
  auto fourth = pool.Claim();
  ASSERT_TRUE(fourth.ok());
  EXPECT_TRUE(Ended(orphan));
  fourth->reset();
  fs::remove_all(dir);
}

// ---------------------------------------------------------------- bwrap arguments

TEST(BwrapArgsTest, NamespacesMountsDevicesAndTheCommandInOrder) {
  std::string root = TempDir("sysroot");
  fs::create_directories(root + "/usr/bin");
  fs::create_directories(root + "/etc");
  fs::create_symlink("usr/bin", root + "/bin");
  SandboxPlan plan;
  plan.uid = 2000000007;
  plan.work_dir = "/data/jobs/j-1/1/work";
  plan.writable = {"/data/jobs/j-1/1/work", "/data/jobs/j-1/1/metrics.jsonl"};
  plan.readable = {"/data/jobs/j-1/1/control"};
  plan.hidden = {"/data"};
  plan.devices = {{"/dev/nvidia1", "/dev/nvidia1"}, {"/dev/nvidiactl", "/dev/nvidiactl"}};
  plan.hostname = "node-a";
  plan.seccomp_fd = 9;
  plan.info_fd = 11;
  plan.command = {"python3", "train.py", "--"};
  std::vector<std::string> a = BwrapArgs(plan, root);

  for (const char* flag : {"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                           "--unshare-net", "--die-with-parent", "--new-session"}) {
    EXPECT_TRUE(Has(a, {flag})) << flag;
  }
  EXPECT_TRUE(Has(a, {"--cap-drop", "ALL"}));
  EXPECT_TRUE(Has(a, {"--uid", "2000000007", "--gid", "2000000007"}));
  EXPECT_TRUE(Has(a, {"--hostname", "node-a"}));
  EXPECT_TRUE(Has(a, {"--ro-bind", "/usr", "/usr"}));
  EXPECT_TRUE(Has(a, {"--ro-bind", "/etc", "/etc"}));
  EXPECT_TRUE(Has(a, {"--symlink", "usr/bin", "/bin"}));
  EXPECT_FALSE(Has(a, {"--ro-bind", "/opt", "/opt"}));  // not on this host
  EXPECT_FALSE(Has(a, {"--ro-bind", "/home", "/home"}));
  EXPECT_TRUE(Has(a, {"--seccomp", "9"}));
  EXPECT_TRUE(Has(a, {"--info-fd", "11"}));
  EXPECT_TRUE(Has(a, {"--chdir", "/data/jobs/j-1/1/work", "--", "python3", "train.py", "--"}));
  EXPECT_EQ(a.back(), "--");  // the command's own "--" is the last word
  // Later mounts go on top of earlier ones: the private /tmp and the hidden
  // data dir first, then the job's own paths, then its devices on /dev.
  size_t tmp = IndexOf(a, {"--tmpfs", "/tmp"});
  size_t hidden = IndexOf(a, {"--tmpfs", "/data"});
  size_t control = IndexOf(a, {"--ro-bind", "/data/jobs/j-1/1/control", "/data/jobs/j-1/1/control"});
  size_t work = IndexOf(a, {"--bind", "/data/jobs/j-1/1/work", "/data/jobs/j-1/1/work"});
  size_t metrics =
      IndexOf(a, {"--bind", "/data/jobs/j-1/1/metrics.jsonl", "/data/jobs/j-1/1/metrics.jsonl"});
  size_t dev = IndexOf(a, {"--dev", "/dev"});
  size_t gpu = IndexOf(a, {"--dev-bind", "/dev/nvidia1", "/dev/nvidia1"});
  size_t end = IndexOf(a, {"--"});
  EXPECT_LT(tmp, hidden);
  EXPECT_LT(hidden, control);
  EXPECT_LT(hidden, work);
  EXPECT_LT(work, metrics);
  EXPECT_LT(dev, gpu);
  EXPECT_LT(gpu, end);
  EXPECT_LT(metrics, end);
  // Then the sandbox's own root, its /dev and the cover of the data dir
  // turn read-only.
  EXPECT_LT(gpu, IndexOf(a, {"--remount-ro", "/dev"}));
  EXPECT_LT(IndexOf(a, {"--remount-ro", "/data"}), IndexOf(a, {"--remount-ro", "/"}));
  EXPECT_LT(IndexOf(a, {"--remount-ro", "/"}), end);
  EXPECT_LT(IndexOf(a, {"--tmpfs", "/dev/shm"}), IndexOf(a, {"--remount-ro", "/dev"}));

  plan.network = true;
  EXPECT_FALSE(Has(BwrapArgs(plan, root), {"--unshare-net"}));
  fs::remove_all(root);
}

TEST(SeccompTest, TheFilterIsABpfProgram) {
  auto bpf = JobSeccompFilter();
  ASSERT_TRUE(bpf.ok()) << bpf.status().ToString();
  EXPECT_GT(bpf->size(), 8u * 40);  // one sock_filter is 8 bytes: dozens of rules
  EXPECT_EQ(bpf->size() % 8, 0u);
}

// ---------------------------------------------------------------- on this host

// Real bubblewrap jobs, as root, in real cgroups when the host has them.
class HostSandbox : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to run jobs as their own uid";
    dir_ = TempDir("sandbox");
    ASSERT_FALSE(dir_.empty());
    ::chmod(dir_.c_str(), 0711);
    data_ = dir_ + "/data";
    fs::create_directories(data_ + "/jobs");
    std::ofstream(data_ + "/node.token") << "secret-node-token\n";
    ::chmod((data_ + "/node.token").c_str(), 0600);
    devs_ = dir_ + "/dev";
    fs::create_directories(devs_);
    for (const char* name : {"nvidia0", "nvidia1", "nvidiactl"}) {
      std::string p = devs_ + "/" + name;
      ASSERT_EQ(::mknod(p.c_str(), S_IFCHR | 0666, ::makedev(1, 3)), 0) << p;  // like /dev/null
      ::chmod(p.c_str(), 0666);
    }
    processes_ = std::make_unique<ProcessRuntime>();
    if (auto layout = DetectCgroups(); layout.ok()) {
      auto m = CgroupManager::Create(*layout, "tide-sandbox-test-" + std::to_string(::getpid()));
      if (m.ok()) {
        cgroups_ = std::move(m).value();
        processes_->set_cgroups(cgroups_.get());
      }
    }
    SandboxOptions so;
    so.uids = {2100000000u, 2100000099u};
    so.lock_dir = dir_ + "/locks";
    so.gpu_dev_root = devs_;
    so.hidden = {data_};
    auto rt = SandboxRuntime::Create(so, processes_.get());
    if (!rt.ok() && rt.status().message().find("bwrap not found") != std::string::npos) {
      GTEST_SKIP() << rt.status().message();
    }
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    sandbox_ = std::move(rt).value();
  }
  void TearDown() override {
    sandbox_.reset();
    cgroups_.reset();
    processes_.reset();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // A job's directories, as the agent lays them out.
  LaunchSpec Job(const std::string& id, const std::string& script) {
    return testing::JobSpec(data_, id, script);
  }

  struct Ran {
    ExitStatus exit;
    std::string output;
    int64_t uid = -1;
  };
  Ran Run(const LaunchSpec& spec) {
    Ran r;
    auto p = sandbox_->Start(spec);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) return r;
    r.uid = (*p)->uid();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd pfd{(*p)->output_fd(), POLLIN, 0};
      if (::poll(&pfd, 1, 50) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read((*p)->output_fd(), buf, sizeof buf);
      if (n == 0) break;
      if (n > 0) r.output.append(buf, static_cast<size_t>(n));
    }
    auto e = (*p)->Wait(10'000);
    EXPECT_TRUE(e.has_value());
    if (e) r.exit = *e;
    EXPECT_TRUE((*p)->KillTree().ok());
    return r;
  }

  std::string dir_, data_, devs_;
  std::unique_ptr<ProcessRuntime> processes_;
  std::unique_ptr<CgroupManager> cgroups_;
  std::unique_ptr<SandboxRuntime> sandbox_;
};

TEST_F(HostSandbox, AJobRunsAsItsOwnUidWithoutCapabilities) {
  Ran r = Run(Job("who", "id -u; grep CapEff /proc/self/status; hostname; echo $$; "
                         "echo core $(ulimit -c); echo adj $(cat /proc/self/oom_score_adj); "
                         "echo hi > out.txt && cat out.txt"));
  EXPECT_EQ(r.exit.exit_code, 0) << r.output;
  EXPECT_GE(r.uid, 2100000000);
  EXPECT_LE(r.uid, 2100000099);
  EXPECT_NE(r.output.find(std::to_string(r.uid) + "\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CapEff:\t0000000000000000"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nhi\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("core 0\n"), std::string::npos) << r.output;  // no dumps to the host
  EXPECT_NE(r.output.find("adj " + std::to_string(JobOomScoreAdj()) + "\n"), std::string::npos)
      << r.output;
  struct stat st {};
  ASSERT_EQ(::stat((data_ + "/jobs/who/1/work/out.txt").c_str(), &st), 0);
  EXPECT_EQ(static_cast<int64_t>(st.st_uid), r.uid);
  // Its directories are its own: no other job's uid reads through them.
  ASSERT_EQ(::stat((data_ + "/jobs/who/1/work").c_str(), &st), 0);
  EXPECT_EQ(static_cast<int64_t>(st.st_uid), r.uid);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

TEST_F(HostSandbox, TheHostIsReadOnlyAndTheDataDirIsNotThere) {
  Ran r = Run(Job("fs", "for p in /usr/x /etc/x /var/x /x /dev/x " + data_ + "/x " + data_ +
                        "/jobs/x; do "
                        "  (echo pwned > $p) 2>/dev/null && echo WROTE $p; done; "
                        "cat " + data_ + "/node.token 2>/dev/null && echo READ-TOKEN; "
                        "ls " + data_ + "/jobs; "
                        "echo private > /tmp/tide-sandbox-leak && cat /tmp/tide-sandbox-leak; "
                        "echo shm > /dev/shm/s && cat /dev/shm/s; "
                        "cat /etc/shadow >/dev/null 2>&1 && echo READ-SHADOW; echo done"));
  EXPECT_EQ(r.exit.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("WROTE"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("READ-"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("secret-node-token"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fs\n"), std::string::npos) << r.output;  // only its own job is there
  EXPECT_NE(r.output.find("private\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("shm\n"), std::string::npos) << r.output;  // DataLoader workers need it
  EXPECT_FALSE(fs::exists("/tmp/tide-sandbox-leak"));  // its /tmp was its own
  EXPECT_FALSE(fs::exists(data_ + "/x"));
  EXPECT_NE(r.output.find("done"), std::string::npos) << r.output;
}

TEST_F(HostSandbox, NoNetworkUnlessAskedFor) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(s, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string port = std::to_string(ntohs(addr.sin_port));
  std::string probe = "python3 -c 'import socket\ntry:\n socket.create_connection((\"127.0.0.1\", " +
                      port + "), 3); print(\"CONNECTED\")\nexcept OSError as e: print(\"refused\", e)'";
  Ran off = Run(Job("net-off", probe));
  EXPECT_NE(off.output.find("refused"), std::string::npos) << off.output;
  LaunchSpec on = Job("net-on", probe);
  on.network = true;
  Ran r = Run(on);
  EXPECT_NE(r.output.find("CONNECTED"), std::string::npos) << r.output;
  ::close(s);
}

TEST_F(HostSandbox, OnlyTheAssignedGpuDevicesAreThere) {
  LaunchSpec spec = Job("gpu", "ls /dev; test -c /dev/nvidia0 && echo x > /dev/nvidia0 && "
                               "echo OPENED-0; test -e /dev/nvidia1 && echo OPENED-1; "
                               "test -e " + devs_ + " && echo OPENED-ROOT; "
                               "(echo x > /dev/nvidia1) 2>/dev/null && echo MADE-1; echo done");
  spec.devices = {"nvidia0", "nvidiactl", "nvidia-uvm"};  // no nvidia-uvm here: skipped
  Ran r = Run(spec);
  EXPECT_NE(r.output.find("OPENED-0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nvidiactl"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("OPENED-1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("OPENED-ROOT"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("MADE-1"), std::string::npos) << r.output;  // /dev is read-only
  EXPECT_NE(r.output.find("done"), std::string::npos) << r.output;
}

TEST_F(HostSandbox, SeccompRefusesPtraceNamespacesAndKeyrings) {
  Ran r = Run(Job("seccomp",
                  "python3 -c '\n"
                  "import ctypes, os\n"
                  "libc = ctypes.CDLL(None, use_errno=True)\n"
                  "def try_(name, rc):\n"
                  "  print(name, \"ok\" if rc == 0 else os.strerror(ctypes.get_errno()))\n"
                  "try_(\"ptrace\", libc.ptrace(0, 0, 0, 0))\n"          // PTRACE_TRACEME
                  "try_(\"unshare\", libc.unshare(0x10000000))\n"         // CLONE_NEWUSER
                  "try_(\"keyctl\", libc.syscall(250, 0, 0, 0, 0))\n"    // keyctl on x86_64
                  "try_(\"mount\", libc.mount(b\"none\", b\"/tmp\", b\"tmpfs\", 0, None))\n"
                  "pid = os.fork()\n"                                     // plain fork still works
                  "if pid == 0: os._exit(7)\n"
                  "print(\"fork\", os.waitpid(pid, 0)[1] >> 8)\n"
                  "'"));
  EXPECT_EQ(r.exit.exit_code, 0) << r.output;
  for (const char* call : {"ptrace", "unshare", "keyctl", "mount"}) {
    EXPECT_NE(r.output.find(std::string(call) + " Operation not permitted"), std::string::npos)
        << call << ": " << r.output;
  }
  EXPECT_NE(r.output.find("fork 7"), std::string::npos) << r.output;
}

// bwrap's outer process exits as soon as its pid 1 reports the job's exit,
// without waiting for that pid 1, which is then handed to the agent (a
// subreaper): a job that exits by itself, or is stopped, leaves no zombie.
TEST_F(HostSandbox, NoZombieOfAJobIsLeftToTheAgent) {
  auto children_of = [](int64_t uid) {
    int n = 0;
    for (pid_t kid : ListOwnChildren()) n += ProbeUid(kid, static_cast<uid_t>(uid)).runs_as;
    return n;
  };
  for (int i = 0; i < 5; ++i) {
    Ran r = Run(Job("exits-" + std::to_string(i), "true"));
    EXPECT_EQ(r.exit.exit_code, 0);
    EXPECT_EQ(children_of(r.uid), 0) << "after an exit, round " << i;
  }
  for (int i = 0; i < 3; ++i) {
    auto p = sandbox_->Start(Job("stopped-" + std::to_string(i), "echo up; exec sleep 60"));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    const int64_t uid = (*p)->uid();
    for (int k = 0; k < 500; ++k) {
      pollfd pfd{(*p)->output_fd(), POLLIN, 0};
      if (::poll(&pfd, 1, 10) > 0) break;
    }
    ASSERT_TRUE((*p)->Signal(SIGTERM).ok());  // the job ends; bwrap exits by itself
    ASSERT_TRUE((*p)->Wait(10'000).has_value());
    ASSERT_TRUE((*p)->KillTree().ok());
    EXPECT_EQ(children_of(uid), 0) << "after a stop, round " << i;
  }
}

TEST_F(HostSandbox, NothingOfAJobSurvivesItsKill) {
  LaunchSpec spec = Job("escape", "setsid sh -c 'sleep 300 & sleep 300' & "
                                  "(sh -c 'sleep 300 &' &) ; echo started; exec sleep 300");
  auto p = sandbox_->Start(spec);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const int64_t uid = (*p)->uid();
  // Every process of the uid; with `comm`, only those named so.
  auto count = [&](const std::string& comm = "") {
    int n = 0;
    for (const auto& e : fs::directory_iterator("/proc")) {
      std::string name = e.path().filename();
      if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
      struct stat st {};
      if (::stat(e.path().c_str(), &st) != 0 || static_cast<int64_t>(st.st_uid) != uid) continue;
      auto stat = ReadFile(e.path().string() + "/stat");
      if (!comm.empty() && (!stat.ok() || stat->find("(" + comm + ") ") == std::string::npos)) continue;
      ++n;
    }
    return n;
  };
  // Four sleeps stay; the shells between them come and go.
  for (int i = 0; i < 200 && count("sleep") < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(count("sleep"), 4);
  ASSERT_TRUE((*p)->KillTree().ok());
  EXPECT_EQ(count(), 0);
  for (const auto& e : fs::directory_iterator("/proc")) {
    struct stat st {};
    if (::stat(e.path().c_str(), &st) == 0 && static_cast<int64_t>(st.st_uid) == uid) {
      auto stat = ReadFile(e.path().string() + "/stat");
      ADD_FAILURE() << "main " << (*p)->pid() << ": " << (stat.ok() ? *stat : "?");
    }
  }
  p->reset();
}

}  // namespace
}  // namespace tide::agent
