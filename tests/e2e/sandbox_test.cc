// Hostile jobs against a real agent with its default runtime, the sandbox
// (docs/security.md): each tries to do harm and must fail, and the agent
// must keep serving. Memory, fork bombs and CPU are in limits_test.cc.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

namespace fs = std::filesystem;

// The real uid of `pid`, or -1.
int64_t UidOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Uid:", 0) == 0) return std::stoll(line.substr(4));
  }
  return -1;
}

std::vector<pid_t> PidsOfUid(int64_t uid) {
  std::vector<pid_t> pids;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    if (UidOf(std::stoi(name)) == uid) pids.push_back(std::stoi(name));
  }
  return pids;
}

int CountUid(int64_t uid) { return static_cast<int>(PidsOfUid(uid).size()); }

// What /proc says of the processes of `uid`, for a failure's message.
std::string DescribeUid(int64_t uid) {
  std::string out;
  for (pid_t p : PidsOfUid(uid)) {
    std::string stat = ReadAll("/proc/" + std::to_string(p) + "/stat");
    size_t close = stat.rfind(')');
    std::string ppid = close == std::string::npos ? "" : stat.substr(close + 4);
    ppid = ppid.substr(0, ppid.find(' '));
    out += "\n  " + stat.substr(0, close + 20) + "... parent: " +
           ReadAll("/proc/" + ppid + "/cmdline").substr(0, 60);
  }
  return out;
}

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the sandbox runs jobs as their own uid: needs root";
    if (::access("/usr/bin/bwrap", X_OK) != 0) GTEST_SKIP() << "bubblewrap is not installed";
    cluster_.StartServer();
    // Fake GPU device nodes (clones of /dev/null) for the fake GPUs.
    devs_ = cluster_.dir() + "/dev";
    fs::create_directories(devs_);
    for (const char* name : {"nvidia0", "nvidia1", "nvidiactl"}) {
      std::string p = devs_ + "/" + name;
      ASSERT_EQ(::mknod(p.c_str(), S_IFCHR | 0666, ::makedev(1, 3)), 0) << p;
      ::chmod(p.c_str(), 0666);
    }
    cluster_.StartAgent("a", "2xRTX4090:24GB", {"--gpu-dev-root", devs_});
    alice_ = cluster_.ClientFor(cluster_.NewUser("alice"));
    bob_ = cluster_.ClientFor(cluster_.NewUser("bob"));
  }
  std::string AgentDir() const { return cluster_.dir() + "/agent-a"; }
  bool IsUnderAgent(const std::string& path) const { return path.rfind(AgentDir() + "/", 0) == 0; }
  std::string JobDir(const std::string& id) const { return AgentDir() + "/jobs/" + id + "/1"; }
  void WaitForFile(const std::string& path) {
    ASSERT_TRUE(Eventually([&] { return fs::exists(path); }, std::chrono::seconds(30))) << path;
  }
  std::string Log(api::Client& c, const std::string& id) {
    auto log = c.GetLogs(id);
    return log.ok() ? *log : log.status().ToString();
  }

  Cluster cluster_;
  std::string devs_;
  std::unique_ptr<api::Client> alice_, bob_;
};

TEST_F(SandboxTest, ASlurmJobsSrunRunsInTheSandboxAndCannotBeChanged) {
  std::string id = SubmitOk(*alice_, {{"slurm", true},
                                      {"command", {"/bin/bash", "-c",
                                                   "srun -n 2 sh -c 'echo sandboxed $SLURM_PROCID'; "
                                                   "echo x >> \"$(command -v srun)\" || echo read-only"}}});
  api::Job done = WaitTerminal(*alice_, id);
  std::string log = Log(*alice_, id);
  EXPECT_EQ(done.status, api::JobStatus::kCompleted) << done.reason << log;
  EXPECT_NE(log.find("sandboxed 0"), std::string::npos) << log;
  EXPECT_NE(log.find("sandboxed 1"), std::string::npos) << log;
  EXPECT_NE(log.find("read-only"), std::string::npos) << log;
}

TEST_F(SandboxTest, AJobCannotReadAnotherJobsFilesOrTheAgentsToken) {
  std::string victim = SubmitOk(*alice_, {{"command", "echo alice-secret > secret; "
                                                      "echo alice-out > $TIDE_OUTPUT_DIR/o; "
                                                      "echo alice-ckpt > $TIDE_CHECKPOINT_DIR/c; "
                                                      "touch ready; sleep 60"}});
  WaitForFile(JobDir(victim) + "/work/ready");
  const std::string job_dir = JobDir(victim);
  std::string thief = SubmitOk(
      *bob_,
      {{"command", "for f in " + job_dir + "/work/secret " + job_dir + "/output/o " + job_dir +
                       "/checkpoint/c " + AgentDir() + "/node.token " + cluster_.dir() +
                       "/server/admin.token; do cat $f 2>&1; done; "
                       "echo jobs: $(ls " + AgentDir() + "/jobs); "
                       "grep -r alice- / --include=secret 2>/dev/null; "
                       "echo looked"}});
  api::Job done = WaitTerminal(*bob_, thief);
  std::string log = Log(*bob_, thief);
  EXPECT_EQ(done.status, api::JobStatus::kCompleted) << log;
  EXPECT_NE(log.find("looked"), std::string::npos) << log;
  EXPECT_EQ(log.find("alice-"), std::string::npos) << log;
  std::string node_token = ReadAll(AgentDir() + "/node.token");
  ASSERT_FALSE(node_token.empty());
  EXPECT_EQ(log.find(node_token.substr(0, 20)), std::string::npos) << log;
  // Not even its name: only the thief's own job is there.
  EXPECT_NE(log.find("jobs: " + thief + "\n"), std::string::npos) << log;
  EXPECT_TRUE(alice_->CancelJob(victim).ok());
  EXPECT_EQ(WaitTerminal(*alice_, victim).status, api::JobStatus::kCancelled);
}

TEST_F(SandboxTest, AJobCannotWriteOutsideItsDirectories) {
  std::vector<std::string> targets = {"/usr/tide-pwned", "/etc/tide-pwned", "/tide-pwned",
                                      AgentDir() + "/tide-pwned", cluster_.dir() + "/tide-pwned",
                                      AgentDir() + "/jobs/tide-pwned"};
  std::string script;
  for (const std::string& t : targets) script += "(echo x > " + t + ") 2>/dev/null && echo WROTE " + t + "; ";
  script += "echo mine > $TIDE_OUTPUT_DIR/mine.txt; echo done";
  std::string id = SubmitOk(*alice_, {{"command", script}});
  api::Job done = WaitTerminal(*alice_, id);
  std::string log = Log(*alice_, id);
  EXPECT_EQ(done.status, api::JobStatus::kCompleted) << log;
  for (const std::string& t : targets) {
    EXPECT_FALSE(fs::exists(t)) << t;  // the host is untouched
    // Under /tmp a write lands in the job's own private /tmp, if anywhere.
    if (t.rfind("/tmp/", 0) != 0 || IsUnderAgent(t)) {
      EXPECT_EQ(log.find("WROTE " + t + "\n"), std::string::npos) << log;
    }
  }
  EXPECT_EQ(*alice_->GetOutput(id, "mine.txt"), "mine\n");  // its own output still works
}

TEST_F(SandboxTest, NoNetworkUnlessTheJobAsksForIt) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(s, 8), 0);
  socklen_t len = sizeof addr;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string probe =
      "python3 -c 'import socket\ntry:\n socket.create_connection((\"127.0.0.1\", " +
      std::to_string(ntohs(addr.sin_port)) +
      "), 5); print(\"CONNECTED\")\nexcept OSError as e: print(\"refused:\", e)'";
  std::string off = SubmitOk(*alice_, {{"command", probe}});
  WaitTerminal(*alice_, off);
  EXPECT_NE(Log(*alice_, off).find("refused:"), std::string::npos) << Log(*alice_, off);
  std::string on = SubmitOk(*alice_, {{"command", probe}, {"network", true}});
  WaitTerminal(*alice_, on);
  EXPECT_NE(Log(*alice_, on).find("CONNECTED"), std::string::npos) << Log(*alice_, on);
  ::close(s);
  auto job = alice_->GetJob(on);
  ASSERT_TRUE(job.ok());
  EXPECT_TRUE(job->spec.network);
}

TEST_F(SandboxTest, OnlyTheAssignedGpusDeviceIsThere) {
  std::string id = SubmitOk(
      *alice_, {{"command", "for d in 0 1; do (echo x > /dev/nvidia$d) 2>/dev/null && "
                            "echo opened $d; done; (echo x > " + devs_ + "/nvidia0) 2>/dev/null "
                            "&& echo opened-root; echo visible=$CUDA_VISIBLE_DEVICES; ls /dev"},
                {"resources", {{"gpu_count", 1}}}});
  api::Job done = WaitTerminal(*alice_, id);
  std::string log = Log(*alice_, id);
  EXPECT_EQ(done.status, api::JobStatus::kCompleted) << log;
  ASSERT_EQ(done.gpus.size(), 1u);
  const int mine = done.gpus[0];
  EXPECT_NE(log.find("opened " + std::to_string(mine)), std::string::npos) << log;
  EXPECT_EQ(log.find("opened " + std::to_string(1 - mine)), std::string::npos) << log;
  EXPECT_EQ(log.find("opened-root"), std::string::npos) << log;
  EXPECT_NE(log.find("nvidiactl"), std::string::npos) << log;
}

TEST_F(SandboxTest, AJobCannotTraceOrSignalItsNeighbour) {
  std::string neighbour = SubmitOk(*alice_, {{"command", "touch ready; exec sleep 60"}});
  WaitForFile(JobDir(neighbour) + "/work/ready");
  pid_t target = 0;
  ASSERT_TRUE(Eventually([&] {
    for (pid_t p : JobProcesses(neighbour)) {
      if (ReadAll("/proc/" + std::to_string(p) + "/comm") == "sleep\n") target = p;
    }
    return target != 0;
  }));
  const std::string pid = std::to_string(target);
  std::string hostile = SubmitOk(
      *bob_, {{"command", "python3 -c '\n"
                          "import ctypes, os\n"
                          "libc = ctypes.CDLL(None, use_errno=True)\n"
                          "r = libc.ptrace(16, " + pid + ", 0, 0)\n"  // PTRACE_ATTACH
                          "print(\"ptrace\", r, os.strerror(ctypes.get_errno()))\n"
                          "r = libc.ptrace(0, 0, 0, 0)\n"  // PTRACE_TRACEME
                          "print(\"traceme\", r, os.strerror(ctypes.get_errno()))\n"
                          "try:\n"
                          "  os.kill(" + pid + ", 9); print(\"KILLED\")\n"
                          "except OSError as e: print(\"kill\", e.strerror)\n"
                          "'"}});
  WaitTerminal(*bob_, hostile);
  std::string log = Log(*bob_, hostile);
  EXPECT_NE(log.find("ptrace -1 Operation not permitted"), std::string::npos) << log;
  EXPECT_NE(log.find("traceme -1 Operation not permitted"), std::string::npos) << log;
  EXPECT_EQ(log.find("KILLED"), std::string::npos) << log;
  EXPECT_FALSE(ProcessGone(target));
  api::Job n = *alice_->GetJob(neighbour);
  EXPECT_EQ(n.status, api::JobStatus::kRunning);
  EXPECT_TRUE(alice_->CancelJob(neighbour).ok());
  WaitTerminal(*alice_, neighbour);
}

// Processes that setsid away and double-fork, then the job is ended.
std::string EscapeArtist() {
  return "setsid sh -c 'sleep 300 & sleep 300' & (sh -c 'sleep 300 &' &); "
         "sleep 1; touch ready; exec sleep 300";
}

TEST_F(SandboxTest, NothingOfAJobSurvivesItsCancel) {
  std::string id = SubmitOk(*alice_, {{"command", EscapeArtist()}});
  WaitForFile(JobDir(id) + "/work/ready");
  std::vector<pid_t> procs = JobProcesses(id);
  ASSERT_GE(procs.size(), 4u);
  int64_t uid = -1;
  for (pid_t p : procs) {
    int64_t u = UidOf(p);
    if (u > 0) uid = u;  // bwrap's own outer process is the uid too
  }
  ASSERT_GE(uid, Cluster::FirstJobUid());
  EXPECT_GE(CountUid(uid), 4);
  ASSERT_TRUE(alice_->CancelJob(id).ok());
  EXPECT_EQ(WaitTerminal(*alice_, id).status, api::JobStatus::kCancelled);
  EXPECT_TRUE(Eventually([&] { return CountUid(uid) == 0; }, std::chrono::seconds(10)))
      << CountUid(uid) << " processes of uid " << uid << " survive:" << DescribeUid(uid);
  for (pid_t p : procs) EXPECT_TRUE(ProcessGone(p)) << p;
}

TEST_F(SandboxTest, NothingOfAJobSurvivesTheAgent) {
  std::string id = SubmitOk(*alice_, {{"command", EscapeArtist()}});
  WaitForFile(JobDir(id) + "/work/ready");
  std::vector<pid_t> procs = JobProcesses(id);
  ASSERT_GE(procs.size(), 4u);
  cluster_.agent("a").Signal(SIGKILL);
  cluster_.agent("a").Wait(std::chrono::seconds(10));
  EXPECT_TRUE(Eventually(
      [&] {
        for (pid_t p : procs) {
          if (!ProcessGone(p)) return false;
        }
        return JobProcesses(id).empty();
      },
      std::chrono::seconds(10)));
}

TEST_F(SandboxTest, TheProcessRuntimeIsRefusedUnlessInsecureIsSaid) {
  CliResult r = cluster_.Cli({"agent", "--server", cluster_.url(), "--data-dir",
                              cluster_.dir() + "/agent-p", "--fake-gpus", "1xRTX4090:24GB",
                              "--runtime", "process"},
                             "");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE((r.out + r.err).find("--insecure-process-runtime"), std::string::npos) << r.out << r.err;
  CliResult bad = cluster_.Cli({"agent", "--server", cluster_.url(), "--data-dir",
                                cluster_.dir() + "/agent-p", "--fake-gpus", "1xRTX4090:24GB",
                                "--job-uids", "0-100"},
                               "");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE((bad.out + bad.err).find("--job-uids"), std::string::npos) << bad.out << bad.err;
}

}  // namespace
}  // namespace tide::e2e
