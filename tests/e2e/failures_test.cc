// Failures: kill -9 of the server and of an agent; acknowledged means durable.
#include <gtest/gtest.h>
#include <signal.h>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

using nlohmann::json;

TEST(FailuresTest, ServerKill9MidRunThenJobStillCompletes) {
  Cluster cluster("5s");
  cluster.StartServer();
  cluster.StartAgent("a1", "2xRTX4090:24GB");
  auto alice = cluster.ClientFor(cluster.NewUser("alice"));
  auto job = alice->SubmitJob(Spec({{"command", "echo start; sleep 4; echo done"},
                                    {"resources", {{"gpu_count", 1}}}}));
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(Eventually([&] { return alice->GetJob(job->id)->status == api::JobStatus::kRunning; }));
  cluster.KillServer(SIGKILL);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  cluster.StartServer();
  auto done = WaitTerminal(*alice, job->id, std::chrono::seconds(60));
  EXPECT_EQ(done.status, api::JobStatus::kCompleted) << done.reason;
  EXPECT_EQ(done.attempt, 1) << "the job kept running through the restart";
  EXPECT_NE(alice->GetLogs(job->id)->find("done"), std::string::npos);
}

TEST(FailuresTest, AgentKill9JobRerunsOnTheOther) {
  Cluster cluster("3s");
  cluster.StartServer();
  cluster.StartAgent("a1", "1xRTX4090:24GB");
  cluster.StartAgent("a2", "1xRTX4090:24GB");
  auto alice = cluster.ClientFor(cluster.NewUser("alice"));
  auto job = alice->SubmitJob(Spec({{"command", "echo attempt=$TIDE_ATTEMPT; sleep 3"},
                                    {"resources", {{"gpu_count", 1}}}}));
  ASSERT_TRUE(job.ok());
  api::Job running;
  ASSERT_TRUE(Eventually([&] {
    running = *alice->GetJob(job->id);
    return running.status == api::JobStatus::kRunning;
  }));
  auto nodes = cluster.admin().ListNodes();
  std::string victim;
  for (auto& n : *nodes) {
    if (n.id == running.node_id) victim = n.name;
  }
  ASSERT_FALSE(victim.empty());
  cluster.agent(victim).Signal(SIGKILL);
  cluster.agent(victim).Wait(std::chrono::seconds(5));

  auto done = WaitTerminal(*alice, job->id, std::chrono::seconds(60));
  EXPECT_EQ(done.status, api::JobStatus::kCompleted) << done.reason;
  EXPECT_EQ(done.attempt, 2);
  EXPECT_NE(done.node_id, running.node_id);
  ASSERT_EQ(done.attempts.size(), 2u);
  EXPECT_EQ(done.attempts[0].reason, "node_lost");
  EXPECT_NE(alice->GetLogs(job->id, 2)->find("attempt=2"), std::string::npos);
  bool lost = false;
  auto after = cluster.admin().ListNodes();
  ASSERT_TRUE(after.ok());
  for (auto& n : *after) {
    if (n.name == victim) lost = n.state == api::NodeState::kLost;
  }
  EXPECT_TRUE(lost);
}

TEST(FailuresTest, AcknowledgedSubmissionsSurviveKill9) {
  Cluster cluster;
  cluster.StartServer();
  auto alice = cluster.ClientFor(cluster.NewUser("alice"));
  std::vector<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    auto job = alice->SubmitJob(Spec({{"name", "d" + std::to_string(i)}, {"command", {"true"}}}));
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    ids.push_back(job->id);
  }
  cluster.KillServer(SIGKILL);
  cluster.StartServer();
  for (auto& id : ids) {
    auto job = alice->GetJob(id);
    ASSERT_TRUE(job.ok()) << id << " was acknowledged but lost";
    EXPECT_EQ(job->status, api::JobStatus::kQueued);
  }
}

}  // namespace
}  // namespace tide::e2e
