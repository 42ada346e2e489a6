// Multi-node (gang) jobs through the real server and two real agents: both
// ranks start together, find each other at MASTER_ADDR:MASTER_PORT like
// torchrun's rendezvous does, keep their own logs and outputs; one failing
// rank stops the other with the notice and fails the job.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

using nlohmann::json;

// Rank 0 listens at the rendezvous, rank 1 connects and says hello; each
// prints what it learnt and writes an output file.
constexpr const char* kRendezvous = R"PY(python3 -c '
import os, socket, time
rank = int(os.environ["TIDE_NODE_RANK"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
print("rank", rank, "of", os.environ["TIDE_NNODES"], "world", os.environ["WORLD_SIZE"],
      "gpus", os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
if rank == 0:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(1)
    c, _ = s.accept()
    print("rank 0 heard:", c.recv(100).decode(), flush=True)
    c.sendall(b"welcome")
else:
    for i in range(400):
        try:
            c = socket.create_connection((addr, port))
            break
        except OSError:
            time.sleep(0.05)
    c.sendall(b"hello from rank 1")
    print("rank 1 heard:", c.recv(100).decode(), flush=True)
open(os.path.join(os.environ["TIDE_OUTPUT_DIR"], "result.txt"), "w").write(str(rank))
')PY";

class GangTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer();
    cluster_.StartAgent("a", "2xRTX4090:24GB");
    cluster_.StartAgent("b", "2xRTX4090:24GB");
    token_ = cluster_.NewUser("alice");
    client_ = cluster_.ClientFor(token_);
  }
  Cluster cluster_;
  std::string token_;
  std::unique_ptr<api::Client> client_;
};

TEST_F(GangTest, RanksMeetAtTheRendezvousAndKeepTheirOwnLogsAndOutputs) {
  std::string id = SubmitOk(*client_, {{"name", "ddp"},
                                       {"resources", {{"nodes", 2}, {"gpus_per_node", 2}}},
                                       {"command", kRendezvous}});
  api::Job done = WaitTerminal(*client_, id);
  ASSERT_EQ(done.status, api::JobStatus::kCompleted) << done.reason;
  ASSERT_EQ(done.attempts.size(), 1u);
  const api::Attempt& a = done.attempts[0];
  ASSERT_EQ(a.ranks.size(), 2u);
  EXPECT_NE(a.ranks[0].node_id, a.ranks[1].node_id);
  EXPECT_EQ(a.master_addr, "127.0.0.1");  // where the agents connect from

  auto rank0 = client_->GetLogs(id, 0, 0, 0);
  auto rank1 = client_->GetLogs(id, 0, 0, 1);
  ASSERT_TRUE(rank0.ok() && rank1.ok());
  EXPECT_NE(rank0->find("rank 0 of 2 world 4 gpus 0,1"), std::string::npos) << *rank0;
  EXPECT_NE(rank0->find("rank 0 heard: hello from rank 1"), std::string::npos) << *rank0;
  EXPECT_NE(rank1->find("rank 1 of 2 world 4"), std::string::npos) << *rank1;
  EXPECT_NE(rank1->find("rank 1 heard: welcome"), std::string::npos) << *rank1;

  auto files = client_->ListOutputs(id);
  ASSERT_TRUE(files.ok());
  std::vector<std::string> paths;
  for (const auto& f : files.value()) paths.push_back(f.path);
  std::sort(paths.begin(), paths.end());
  EXPECT_EQ(paths, (std::vector<std::string>{"rank-1/result.txt", "result.txt"}));
  EXPECT_EQ(*client_->GetOutput(id, "rank-1/result.txt"), "1");

  // The command line shows each rank; a rank the job does not have is refused.
  CliResult logs = cluster_.Cli({"logs", id, "--rank", "1"}, token_);
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_NE(logs.out.find("rank 1 heard: welcome"), std::string::npos) << logs.out;
  CliResult bad = cluster_.Cli({"logs", id, "--rank", "2"}, token_);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("rank"), std::string::npos) << bad.err;
  CliResult status = cluster_.Cli({"status", id}, token_);
  EXPECT_NE(status.out.find("Ranks of attempt 1"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("2 nodes x 2"), std::string::npos) << status.out;
}

TEST_F(GangTest, AFailedRankStopsTheOtherAndFailsTheJob) {
  std::string id = SubmitOk(
      *client_,
      {{"name", "broken"},
       {"grace", "10s"},
       {"resources", {{"nodes", 2}, {"gpu_count", 1}}},
       {"command",
        "if [ \"$TIDE_NODE_RANK\" = 1 ]; then echo rank 1 fails; exit 3; fi; "
        "trap 'echo notice: $(head -1 \"$TIDE_NOTICE_FILE\"); exit 0' TERM; "
        "echo rank 0 waits; while true; do sleep 0.1; done"}});
  api::Job done = WaitTerminal(*client_, id);
  EXPECT_EQ(done.status, api::JobStatus::kFailed);
  EXPECT_EQ(done.reason, "exit_code:3");
  EXPECT_EQ(done.exit_code, 3);
  auto rank0 = client_->GetLogs(id, 0, 0, 0);
  ASSERT_TRUE(rank0.ok());
  EXPECT_NE(rank0->find("notice: reason=gang_failed"), std::string::npos) << *rank0;
}

TEST_F(GangTest, BadAndUnsatisfiableGangsSaySo) {
  auto zero = PostJobJson(*client_, {{"command", "true"}, {"resources", {{"nodes", 0}}}});
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().field(), "resources.nodes");
  auto both = PostJobJson(
      *client_, {{"command", "true"}, {"resources", {{"gpu_count", 1}, {"gpus_per_node", 2}}}});
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().field(), "resources.gpus_per_node");
  // Three nodes asked, two exist: it waits and says why.
  std::string id = SubmitOk(*client_, {{"command", "true"}, {"resources", {{"nodes", 3}}}});
  auto job = client_->GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->status, api::JobStatus::kQueued);
  EXPECT_NE(job->pending_reason.find("3 nodes"), std::string::npos) << job->pending_reason;
}

}  // namespace
}  // namespace tide::e2e
