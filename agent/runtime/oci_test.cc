#include "agent/runtime/oci.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/runtime/cgroup.h"
#include "agent/testing/busybox_image.h"
#include "agent/testing/job_spec.h"
#include "common/paths.h"

namespace tide::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string TempDir(const std::string& what) {
  std::string tmpl = "/tmp/tide-" + what + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

// How many processes run as `uid` (zombies not counted: the test process,
// a subreaper, collects a dead container's); with `comm`, only those named
// so (a job's `sleep`s, not the shells that start them and exit).
int CountUid(int64_t uid, const std::string& comm = "") {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    struct stat st {};
    if (::stat(e.path().c_str(), &st) != 0 || static_cast<int64_t>(st.st_uid) != uid) continue;
    auto stat = ReadFile(e.path().string() + "/stat");
    if (stat.ok() && stat->find(") Z ") != std::string::npos) continue;
    if (!comm.empty() && (!stat.ok() || stat->find("(" + comm + ") ") == std::string::npos)) continue;
    ++n;
  }
  return n;
}

// ---------------------------------------------------------------- flags

TEST(OciImagesTest, ParsesNameEqualsRootfsAndRefusesTheRest) {
  std::string dir = TempDir("oci-images");
  auto ok = ParseOciImages({"busybox=" + dir, "ubuntu-22.04=" + dir + "/"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->at("busybox"), dir);
  EXPECT_EQ(ok->at("ubuntu-22.04"), dir + "/");
  for (const std::string& bad : std::vector<std::string>{"busybox", "=" + dir, "host=" + dir, "Bad Name=" + dir, "x=relative/dir",
        "x=" + dir + "/missing", "x=" + dir + ",upperdir=/etc"}) {
    auto r = ParseOciImages({bad});
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("--image"), std::string::npos) << bad;
    }
  }
  EXPECT_FALSE(ParseOciImages({"a=" + dir, "a=" + dir}).ok());  // twice
  fs::remove_all(dir);
}

TEST(OciImagesTest, CommandsAreFoundInsideTheImageNotOnTheHost) {
  std::string dir = TempDir("oci-resolve");
  fs::create_directories(dir + "/bin");
  fs::create_directories(dir + "/usr/local/bin");
  std::ofstream(dir + "/bin/tool") << "#!/bin/sh\n";
  ::chmod((dir + "/bin/tool").c_str(), 0755);
  std::ofstream(dir + "/bin/data") << "not executable\n";
  // An absolute link is the image's, not the host's.
  fs::create_symlink("/bin/tool", dir + "/usr/local/bin/tool2");
  fs::create_symlink("/usr/bin/env", dir + "/usr/local/bin/hostonly");  // the host has it
  const std::string path = "/usr/local/bin:/bin";
  auto r = ResolveInImage("tool", path, dir, "img", "/nonexistent");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "/bin/tool");
  auto r2 = ResolveInImage("tool2", path, dir, "img", "/nonexistent");
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(*r2, "/usr/local/bin/tool2");
  EXPECT_TRUE(ResolveInImage("/bin/tool", path, dir, "img", "/nonexistent").ok());
  for (const char* missing : {"hostonly", "data", "env", "/usr/bin/env", "/", "//"}) {
    auto m = ResolveInImage(missing, path, dir, "img", "/nonexistent");
    EXPECT_FALSE(m.ok()) << missing;
    if (!m.ok()) {
      EXPECT_NE(m.status().message().find("image \"img\""), std::string::npos);
    }
  }
  // A path beside the image, on the host: whether it exists is not told.
  auto host = ResolveInImage("../../etc/passwd", path, dir, "img", dir);
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.status().message(), "../../etc/passwd: command not found or not executable");
  fs::remove_all(dir);
}

TEST(OciConfigTest, TheContainerGetsOnlyWhatThePlanSays) {
  OciPlan plan;
  plan.uid = 2000000007;
  plan.rootfs = "/data/oci/c/rootfs";
  plan.init = "/usr/bin/tide-init";
  plan.args = {"/bin/sh", "-c", "echo hi"};
  plan.env = {"TIDE_JOB_ID=j-1", "PATH=/bin"};
  plan.work_dir = "/data/jobs/j-1/1/work";
  plan.writable = {"/data/jobs/j-1/1/work", "/data/jobs/j-1/1/output"};
  plan.readable = {"/data/jobs/j-1/1/control"};
  plan.devices = {{"/dev/nvidia0", 'c', 195, 0}};
  plan.hostname = "gpu-7";
  plan.cgroups_path = "tide-1-j-1.1";
  json c = OciConfig(plan);
  EXPECT_EQ(c["process"]["user"]["uid"], 2000000007);
  EXPECT_EQ(c["process"]["user"]["gid"], 2000000007);
  EXPECT_EQ(c["process"]["args"], json({"/.tide/init", "/bin/sh", "-c", "echo hi"}));
  EXPECT_EQ(c["process"]["noNewPrivileges"], true);
  EXPECT_TRUE(c["process"]["capabilities"]["bounding"].empty());
  EXPECT_TRUE(c["process"]["capabilities"]["effective"].empty());
  EXPECT_EQ(c["root"]["readonly"], true);
  EXPECT_EQ(c["hostname"], "gpu-7");
  EXPECT_EQ(c["linux"]["cgroupsPath"], "tide-1-j-1.1");
  EXPECT_EQ(c["process"]["oomScoreAdj"], 0);
  EXPECT_EQ(c["process"]["rlimits"],
            json::parse(R"([{"type": "RLIMIT_CORE", "hard": 0, "soft": 0}])"));

  std::vector<std::string> ns;
  for (const json& n : c["linux"]["namespaces"]) ns.push_back(n["type"]);
  for (const char* want : {"pid", "ipc", "uts", "mount", "cgroup", "network"}) {
    EXPECT_NE(std::find(ns.begin(), ns.end(), want), ns.end()) << want;
  }
  EXPECT_EQ(std::find(ns.begin(), ns.end(), "user"), ns.end());  // real host uids

  // Private /tmp first, then the job's directories; nothing else of the host.
  std::vector<std::string> dests;
  for (const json& m : c["mounts"]) {
    dests.push_back(m["destination"]);
    if (m["type"] == "bind") {
      std::string src = m["source"];
      bool allowed = src == plan.init || src.rfind("/data/jobs/j-1/1/", 0) == 0;
      EXPECT_TRUE(allowed) << src;
      bool ro = std::find(m["options"].begin(), m["options"].end(), "ro") != m["options"].end();
      EXPECT_EQ(ro, src == plan.init || src.find("/control") != std::string::npos) << src;
    }
  }
  auto at = [&](const std::string& d) { return std::find(dests.begin(), dests.end(), d) - dests.begin(); };
  EXPECT_LT(at("/tmp"), at("/data/jobs/j-1/1/work"));
  EXPECT_LT(at("/dev"), at("/dev/shm"));
  EXPECT_EQ(c["linux"]["devices"].size(), 1u);
  EXPECT_EQ(c["linux"]["devices"][0]["major"], 195);
  EXPECT_EQ(c["linux"]["resources"]["devices"][0]["allow"], false);  // deny all first
  EXPECT_EQ(c["linux"]["resources"]["devices"][1]["major"], 195);

  bool ptrace = false;
  for (const json& r : c["linux"]["seccomp"]["syscalls"]) {
    for (const json& n : r["names"]) ptrace = ptrace || n == "ptrace";
  }
  EXPECT_TRUE(ptrace);

  plan.network = true;
  json open = OciConfig(plan);
  for (const json& n : open["linux"]["namespaces"]) EXPECT_NE(n["type"], "network");
}

// ---------------------------------------------------------------- on this host

// Real runc containers over a busybox image, as root, in real cgroups.
class HostOci : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to start containers";
    dir_ = TempDir("oci");
    ASSERT_FALSE(dir_.empty());
    ::chmod(dir_.c_str(), 0711);
    data_ = dir_ + "/data";
    fs::create_directories(data_ + "/jobs");
    std::ofstream(data_ + "/node.token") << "secret-node-token\n";
    ::chmod((data_ + "/node.token").c_str(), 0600);
    image_ = dir_ + "/busybox";
    if (!testing::MakeBusyboxImage(image_)) GTEST_SKIP() << "no static busybox (busybox-static)";
    devs_ = dir_ + "/dev";
    fs::create_directories(devs_);
    for (const char* name : {"nvidia0", "nvidia1", "nvidiactl"}) {
      std::string p = devs_ + "/" + name;
      ASSERT_EQ(::mknod(p.c_str(), S_IFCHR | 0666, ::makedev(1, 3)), 0) << p;  // like /dev/null
    }
    processes_ = std::make_unique<ProcessRuntime>();
    if (auto layout = DetectCgroups(); layout.ok()) {
      auto m = CgroupManager::Create(*layout, "tide-oci-test-" + std::to_string(::getpid()));
      if (m.ok()) {
        cgroups_ = std::move(m).value();
        processes_->set_cgroups(cgroups_.get());
      }
    }
    options_.init = TIDE_INIT_BINARY;
    options_.state_dir = data_ + "/oci";
    options_.images = {{"busybox", image_}};
    options_.uids = {2100000100u, 2100000199u};
    options_.lock_dir = dir_ + "/locks";
    options_.gpu_dev_root = devs_;
    auto rt = OciRuntime::Create(options_, processes_.get(), cgroups_.get());
    if (!rt.ok() && rt.status().message().find("runc not found") != std::string::npos) {
      GTEST_SKIP() << rt.status().message();
    }
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    oci_ = std::move(rt).value();
  }
  void TearDown() override {
    oci_.reset();
    cgroups_.reset();
    processes_.reset();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  LaunchSpec Job(const std::string& id, const std::string& script) {
    LaunchSpec spec = testing::JobSpec(data_, id, script);
    spec.image = "busybox";
    spec.hostname = "gpu-host";
    return spec;
  }

  struct Ran {
    ExitStatus exit;
    std::string output;
    int64_t uid = -1;
  };
  Ran Run(const LaunchSpec& spec) {
    Ran r;
    auto p = oci_->Start(spec);
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
  // Bundles and mounts of containers still on the host.
  int Leftovers() {
    int n = 0;
    for (const auto& e : fs::directory_iterator(options_.state_dir)) {
      if (e.path().filename() != "runc") ++n;
    }
    for (const auto& e : fs::directory_iterator(options_.state_dir + "/runc")) {
      (void)e;
      ++n;
    }
    auto mounts = ReadFile("/proc/self/mountinfo");
    if (mounts.ok() && mounts->find(options_.state_dir) != std::string::npos) ++n;
    return n;
  }

  std::string dir_, data_, devs_, image_;
  OciOptions options_;
  std::unique_ptr<ProcessRuntime> processes_;
  std::unique_ptr<CgroupManager> cgroups_;
  std::unique_ptr<OciRuntime> oci_;
};

TEST_F(HostOci, AJobRunsInTheImageAsItsOwnUid) {
  Ran r = Run(Job("who", "id -u; grep CapEff /proc/self/status; hostname; "
                         "tr '\\0' ' ' < /proc/1/cmdline; echo; "
                         "test -e /usr/bin/python3 || echo NOT-THE-HOST; "
                         "echo hi > out.txt && cat out.txt; exit 3"));
  EXPECT_EQ(r.exit.exit_code, 3) << r.output;
  EXPECT_GE(r.uid, 2100000100);
  EXPECT_LE(r.uid, 2100000199);
  EXPECT_NE(r.output.find(std::to_string(r.uid) + "\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CapEff:\t0000000000000000"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gpu-host\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/.tide/init /bin/sh -c"), std::string::npos) << r.output;  // pid 1
  EXPECT_NE(r.output.find("NOT-THE-HOST"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nhi\n"), std::string::npos) << r.output;
  struct stat st {};
  ASSERT_EQ(::stat((data_ + "/jobs/who/1/work/out.txt").c_str(), &st), 0);
  EXPECT_EQ(static_cast<int64_t>(st.st_uid), r.uid);
  EXPECT_EQ(Leftovers(), 0);
}

TEST_F(HostOci, TheImageIsReadOnlyAndTheDataDirIsNotThere) {
  Ran r = Run(Job("fs", "for p in /bin/x /etc/x /x /dev/x /root/x " + data_ + "/x " + data_ +
                        "/jobs/x; do "
                        "  (echo pwned > $p) 2>/dev/null && echo WROTE $p; done; "
                        "cat " + data_ + "/node.token 2>/dev/null && echo READ-TOKEN; "
                        "ls " + data_ + "/jobs; "
                        "echo private > /tmp/leak && cat /tmp/leak; "
                        "echo shm > /dev/shm/s && cat /dev/shm/s; echo done"));
  EXPECT_EQ(r.exit.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("WROTE"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("READ-TOKEN"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fs\n"), std::string::npos) << r.output;  // only its own job
  EXPECT_NE(r.output.find("private\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("shm\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("done"), std::string::npos) << r.output;
  // The image itself never changed: mount points went to the overlay.
  EXPECT_FALSE(fs::exists(image_ + data_));
  EXPECT_FALSE(fs::exists(image_ + "/.tide"));
  EXPECT_FALSE(fs::exists(image_ + "/var"));
  EXPECT_EQ(fs::status(image_ + "/tmp").permissions(), fs::perms(0755));
}

TEST_F(HostOci, NoNetworkUnlessAskedFor) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(s, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  // -e: nc runs `true` on the connection and ends with it.
  std::string probe = "nc -w 3 127.0.0.1 " + std::to_string(ntohs(addr.sin_port)) +
                      " -e true && echo CONNECTED || echo refused";
  Ran off = Run(Job("net-off", probe));
  EXPECT_NE(off.output.find("refused"), std::string::npos) << off.output;
  LaunchSpec on = Job("net-on", probe);
  on.network = true;
  Ran r = Run(on);
  EXPECT_NE(r.output.find("CONNECTED"), std::string::npos) << r.output;
  ::close(s);
}

TEST_F(HostOci, OnlyTheAssignedGpuDevicesAreThere) {
  LaunchSpec spec = Job("gpu", "ls /dev; echo x > /dev/nvidia0 && echo OPENED-0; "
                               "test -e /dev/nvidia1 && echo OPENED-1; "
                               "mknod /tmp/n1 c 1 3 2>/dev/null && echo MADE-NODE; echo done");
  spec.devices = {"nvidia0", "nvidiactl", "nvidia-uvm"};  // no nvidia-uvm here: skipped
  Ran r = Run(spec);
  EXPECT_NE(r.output.find("OPENED-0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nvidiactl"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("OPENED-1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("MADE-NODE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("done"), std::string::npos) << r.output;
}

TEST_F(HostOci, SeccompRefusesNamespacesAndMounts) {
  Ran r = Run(Job("seccomp", "unshare -U true 2>&1; mount -t tmpfs none /tmp 2>&1; "
                             "sh -c 'exit 7'; echo fork=$?"));
  EXPECT_NE(r.output.find("unshare"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Operation not permitted"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fork=7"), std::string::npos) << r.output;
}

TEST_F(HostOci, TheJobsLimitsHoldInsideTheContainer) {
  if (!cgroups_) GTEST_SKIP() << "no cgroups here";
  LaunchSpec mem = Job("oom", "exec dd if=/dev/zero of=/dev/null bs=256M count=1");
  mem.limits.memory_bytes = 64 << 20;
  Ran m = Run(mem);
  EXPECT_TRUE(m.exit.oom) << m.exit.ToString() << " " << m.output;
  EXPECT_EQ(m.exit.signal, SIGKILL) << m.exit.ToString();

  // ash gives up at the first fork the pids limit refuses.
  LaunchSpec bomb = Job("bomb", "i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); done");
  bomb.limits.pids = 32;
  Ran b = Run(bomb);
  EXPECT_NE(b.output.find("can't fork"), std::string::npos) << b.output;
  EXPECT_NE(b.exit.exit_code, 0);
}

TEST_F(HostOci, NothingOfAJobSurvivesItsKill) {
  LaunchSpec spec = Job("escape", "setsid sh -c 'sleep 300 & sleep 300' & "
                                  "(sh -c 'sleep 300 &' &) ; echo started; exec sleep 300");
  auto p = oci_->Start(spec);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const int64_t uid = (*p)->uid();
  // Four sleeps stay; the shells between them come and go.
  for (int i = 0; i < 250 && CountUid(uid, "sleep") < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(CountUid(uid, "sleep"), 4);
  ASSERT_TRUE((*p)->KillTree().ok());
  EXPECT_EQ(CountUid(uid), 0);
  EXPECT_EQ(Leftovers(), 0);
  p->reset();
}

// The agent dies: runc dies with it (PDEATHSIG), tide-init with runc, and the
// kernel ends the container's pid namespace. The next agent removes the
// bundle, the overlay and runc's state.
TEST_F(HostOci, NothingSurvivesRuncAndTheNextAgentCleansUp) {
  LaunchSpec spec = Job("orphan", "setsid sh -c 'sleep 300 & sleep 300' & exec sleep 300");
  auto p = oci_->Start(spec);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const int64_t uid = (*p)->uid();
  for (int i = 0; i < 250 && CountUid(uid, "sleep") < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(CountUid(uid, "sleep"), 3);
  ASSERT_EQ(::kill((*p)->pid(), SIGKILL), 0);  // runc, as if the agent had died
  for (int i = 0; i < 250 && CountUid(uid) > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(CountUid(uid), 0);
  EXPECT_GT(Leftovers(), 0);
  auto next = OciRuntime::Create(options_, processes_.get(), cgroups_.get());
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(Leftovers(), 0);
  p->reset();
}

TEST_F(HostOci, AMissingCommandOrImageIsAStartFailureThatLeavesNothing) {
  auto missing = oci_->Start(Job("missing", "true"));
  ASSERT_TRUE(missing.ok());
  missing->reset();
  LaunchSpec spec = Job("missing2", "");
  spec.argv = {"python3", "-c", "print(1)"};  // the host has it, the image does not
  auto r = oci_->Start(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not found in image \"busybox\""), std::string::npos)
      << r.status().ToString();
  spec = Job("unknown", "true");
  spec.image = "ubuntu";
  r = oci_->Start(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ubuntu"), std::string::npos);
  // The container's name becomes a directory name: a key that is not one
  // path component is refused before anything is made.
  spec = Job("badkey", "true");
  spec.cgroup_key = "../../escape";
  r = oci_->Start(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bad container name"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(Leftovers(), 0);
}

}  // namespace
}  // namespace tide::agent
