// Jobs in OCI containers (`tide agent --runtime oci --image NAME=ROOTFS`):
// the scheduler places a job only where its image is offered, the job runs
// in the image, contained like the sandbox, and nothing of it survives its
// cancel or the agent. The image is a busybox rootfs (busybox-static).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent/testing/busybox_image.h"
#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

namespace fs = std::filesystem;

// Processes running as `uid`, zombies not counted.
int CountUid(int64_t uid) {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    struct stat st {};
    if (::stat(e.path().c_str(), &st) != 0 || static_cast<int64_t>(st.st_uid) != uid) continue;
    if (ReadAll(e.path().string() + "/stat").find(") Z ") != std::string::npos) continue;
    ++n;
  }
  return n;
}

class OciTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "runc needs root";
    if (::access("/usr/sbin/runc", X_OK) != 0 && ::access("/usr/bin/runc", X_OK) != 0) {
      GTEST_SKIP() << "runc is not installed";
    }
    image_ = cluster_.dir() + "/busybox";
    if (!agent::testing::MakeBusyboxImage(image_)) GTEST_SKIP() << "no static busybox";
    cluster_.StartServer();
    devs_ = cluster_.dir() + "/dev";
    fs::create_directories(devs_);
    for (const char* name : {"nvidia0", "nvidia1", "nvidiactl"}) {
      std::string p = devs_ + "/" + name;
      ASSERT_EQ(::mknod(p.c_str(), S_IFCHR | 0666, ::makedev(1, 3)), 0) << p;
    }
    StartOciAgent();
    alice_ = cluster_.ClientFor(cluster_.NewUser("alice"));
    bob_ = cluster_.ClientFor(cluster_.NewUser("bob"));
  }
  void StartOciAgent() {
    cluster_.StartAgent("o", "2xRTX4090:24GB",
                        {"--runtime", "oci", "--image", "busybox=" + image_, "--gpu-dev-root", devs_});
  }
  std::string AgentDir() const { return cluster_.dir() + "/agent-o"; }
  std::string JobDir(const std::string& id) const { return AgentDir() + "/jobs/" + id + "/1"; }
  void WaitForFile(const std::string& path) {
    ASSERT_TRUE(Eventually([&] { return fs::exists(path); }, std::chrono::seconds(30))) << path;
  }
  std::string Log(api::Client& c, const std::string& id) {
    auto log = c.GetLogs(id);
    return log.ok() ? *log : log.status().ToString();
  }
  // The uid the job's files were handed to.
  int64_t JobUid(const std::string& id) {
    struct stat st {};
    return ::stat((JobDir(id) + "/work").c_str(), &st) == 0 ? static_cast<int64_t>(st.st_uid) : -1;
  }
  // Containers, mounts and bundles the agent holds on the host.
  int Containers() {
    int n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(AgentDir() + "/oci", ec)) {
      if (e.path().filename() != "runc") ++n;
    }
    for (const auto& e : fs::directory_iterator(AgentDir() + "/oci/runc", ec)) {
      (void)e;
      ++n;
    }
    return n;
  }

  Cluster cluster_;
  std::string image_, devs_;
  std::unique_ptr<api::Client> alice_, bob_;
};

TEST_F(OciTest, AJobRunsInItsImageAndOnlyWhereItIsOffered) {
  std::string id = SubmitOk(*alice_, {{"command", "id -u; test -e /usr/bin/python3 || echo IN-THE-IMAGE; "
                                                  "echo result > $TIDE_OUTPUT_DIR/r.txt; ls /dev"},
                                      {"image", "busybox"},
                                      {"resources", {{"gpu_count", 1}}}});
  api::Job done = WaitTerminal(*alice_, id);
  std::string log = Log(*alice_, id);
  EXPECT_EQ(done.status, api::JobStatus::kCompleted) << done.reason << log;
  EXPECT_NE(log.find("IN-THE-IMAGE"), std::string::npos) << log;
  // `id -u` printed a uid of the agent's range.
  const std::string first = std::to_string(Cluster::FirstJobUid());
  EXPECT_NE(log.find(first.substr(0, first.size() - 3)), std::string::npos) << log;
  EXPECT_NE(log.find("nvidia0"), std::string::npos) << log;
  EXPECT_EQ(log.find("nvidia1"), std::string::npos) << log;
  EXPECT_EQ(Containers(), 0);

  // This agent offers no "host": such a job waits and says why.
  std::string host_job = SubmitOk(*alice_, {{"command", "true"}});
  ASSERT_TRUE(Eventually([&] {
    auto j = alice_->GetJob(host_job);
    return j.ok() && j->pending_reason.find("image \"host\"") != std::string::npos;
  }, std::chrono::seconds(15)));
  ASSERT_TRUE(alice_->CancelJob(host_job).ok());
}

TEST_F(OciTest, ASlurmJobFindsSrunInItsContainer) {
  // busybox has no bash to run srun with: that it is there, on the PATH and
  // executable is what the container must give.
  std::string id = SubmitOk(*alice_, {{"slurm", true},
                                      {"command", "p=$(command -v srun) && test -x \"$p\" && "
                                                  "head -1 \"$p\" && echo found"},
                                      {"image", "busybox"},
                                      {"resources", {{"gpu_count", 1}}}});
  api::Job done = WaitTerminal(*alice_, id);
  std::string log = Log(*alice_, id);
  EXPECT_EQ(done.status, api::JobStatus::kCompleted) << done.reason << log;
  EXPECT_NE(log.find("#!/bin/bash\nfound"), std::string::npos) << log;
}

TEST_F(OciTest, HostileJobsInContainersDoNoHarm) {
  std::string victim = SubmitOk(*alice_, {{"command", "echo alice-secret > secret; touch ready; sleep 60"},
                                          {"image", "busybox"}});
  WaitForFile(JobDir(victim) + "/work/ready");
  std::string script = "cat " + JobDir(victim) + "/work/secret 2>&1; cat " + AgentDir() +
                       "/node.token 2>&1; echo jobs: $(ls " + AgentDir() + "/jobs); ";
  for (const std::string& t : {std::string("/bin/pwned"), std::string("/pwned"), AgentDir() + "/pwned"}) {
    script += "(echo x > " + t + ") 2>/dev/null && echo WROTE " + t + "; ";
  }
  script += "nc -w 3 127.0.0.1 " + cluster_.url().substr(cluster_.url().rfind(':') + 1) +
            " -e true && echo CONNECTED-TO-SERVER; echo looked";
  std::string thief = SubmitOk(*bob_, {{"command", script}, {"image", "busybox"}});
  api::Job done = WaitTerminal(*bob_, thief);
  std::string log = Log(*bob_, thief);
  EXPECT_NE(log.find("looked"), std::string::npos) << done.reason << log;
  EXPECT_EQ(log.find("alice-secret"), std::string::npos) << log;
  EXPECT_EQ(log.find("WROTE"), std::string::npos) << log;
  EXPECT_EQ(log.find("CONNECTED"), std::string::npos) << log;
  std::string token = ReadAll(AgentDir() + "/node.token");
  ASSERT_FALSE(token.empty());
  EXPECT_EQ(log.find(token.substr(0, 20)), std::string::npos) << log;
  EXPECT_NE(log.find("jobs: " + thief + "\n"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(image_ + "/pwned"));
  // The neighbour still runs.
  auto v = alice_->GetJob(victim);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->status, api::JobStatus::kRunning);
  ASSERT_TRUE(alice_->CancelJob(victim).ok());
  EXPECT_EQ(WaitTerminal(*alice_, victim).status, api::JobStatus::kCancelled);
}

TEST_F(OciTest, MemoryPastTheLimitEndsTheJobWithOom) {
  std::string hog = SubmitOk(*alice_, {{"command", "exec dd if=/dev/zero of=/dev/null bs=512M count=1"},
                                       {"image", "busybox"},
                                       {"resources", {{"memory", "64MB"}}}});
  api::Job done = WaitTerminal(*alice_, hog);
  EXPECT_EQ(done.status, api::JobStatus::kFailed);
  EXPECT_EQ(done.reason, "oom") << Log(*alice_, hog);
}

// Processes that setsid away and double-fork.
const char* kEscapeArtist = "setsid sh -c 'sleep 300 & sleep 300' & (sh -c 'sleep 300 &' &); "
                            "sleep 1; touch ready; exec sleep 300";

TEST_F(OciTest, NothingOfAJobSurvivesItsCancelOrTheAgent) {
  std::string id = SubmitOk(*alice_, {{"command", kEscapeArtist}, {"image", "busybox"}});
  WaitForFile(JobDir(id) + "/work/ready");
  const int64_t uid = JobUid(id);
  ASSERT_GE(uid, Cluster::FirstJobUid());
  EXPECT_GE(CountUid(uid), 4);
  ASSERT_TRUE(alice_->CancelJob(id).ok());
  EXPECT_EQ(WaitTerminal(*alice_, id).status, api::JobStatus::kCancelled);
  EXPECT_TRUE(Eventually([&] { return CountUid(uid) == 0; }, std::chrono::seconds(10)))
      << CountUid(uid) << " processes of uid " << uid << " survive";
  EXPECT_TRUE(Eventually([&] { return Containers() == 0; }, std::chrono::seconds(10)));

  std::string id2 = SubmitOk(*alice_, {{"command", kEscapeArtist}, {"image", "busybox"}});
  WaitForFile(JobDir(id2) + "/work/ready");
  const int64_t uid2 = JobUid(id2);
  ASSERT_GE(uid2, Cluster::FirstJobUid());
  EXPECT_GE(CountUid(uid2), 4);
  cluster_.agent("o").Signal(SIGKILL);
  cluster_.agent("o").Wait(std::chrono::seconds(10));
  EXPECT_TRUE(Eventually([&] { return CountUid(uid2) == 0; }, std::chrono::seconds(10)))
      << CountUid(uid2) << " processes of uid " << uid2 << " survive the agent";
  EXPECT_GT(Containers(), 0);  // its bundle and runc's state
  StartOciAgent();             // the next agent removes them
  EXPECT_TRUE(Eventually([&] { return Containers() == 0; }, std::chrono::seconds(20)));
}

TEST_F(OciTest, BadImageFlagsAreRefused) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--runtime", "oci"},
        {"--runtime", "oci", "--image", "busybox"},
        {"--runtime", "oci", "--image", "busybox=" + cluster_.dir() + "/missing"},
        {"--runtime", "oci", "--image", "host=" + image_},
        {"--image", "busybox=" + image_}}) {
    std::vector<std::string> argv = {"agent", "--server", cluster_.url(), "--data-dir",
                                     cluster_.dir() + "/agent-bad", "--fake-gpus", "1xRTX4090:24GB"};
    argv.insert(argv.end(), args.begin(), args.end());
    CliResult r = cluster_.Cli(argv, "");
    EXPECT_NE(r.exit_code, 0) << args.back();
    EXPECT_NE((r.out + r.err).find("image"), std::string::npos) << r.out << r.err;
  }
}

}  // namespace
}  // namespace tide::e2e
