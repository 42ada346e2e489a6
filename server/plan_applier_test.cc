// The server's scheduler input against `tide sim`'s, field by field, and
// what the fields the server now fills change: CPU and memory requests,
// node reliability, victims by their last checkpoint.
#include "server/plan_applier.h"

#include <gtest/gtest.h>

#include <optional>

#include "scheduler/replay/simulate.h"
#include "server/testing/core_fixture.h"

namespace tide::server {
namespace {

using api::JobStatus;

constexpr int64_t kCpus = 16;
constexpr int64_t kMemoryMb = 65'536;

sched::NodeView SimNode() {
  sched::NodeView v;
  v.id = "n0";
  v.name = "n0";
  for (int i = 0; i < 2; ++i) v.gpus.push_back({i, "RTX4090", 24'576, true});
  v.cpus = v.cpus_free = kCpus;
  v.memory_mb = v.memory_free_mb = kMemoryMb;
  return v;
}

sched::replay::TraceJob TraceJob(const std::string& id, int64_t submit_s, int gpus, double cpus,
                                 int64_t memory_mb, int64_t walltime_s) {
  sched::replay::TraceJob t;
  t.id = id;
  t.submit_s = submit_s;
  t.duration_s = 1'000;
  t.gpus = gpus;
  t.account = "alice";
  t.cpus = cpus;
  t.memory_mb = memory_mb;
  t.walltime_s = walltime_s;
  return t;
}

api::JobSpec JobSpecOf(int gpus, double cpus, int64_t memory_mb, int64_t max_runtime_s) {
  api::JobSpec s = Spec(gpus);
  s.resources.cpus = cpus;
  s.resources.memory_mb = memory_mb;
  s.max_runtime_s = max_runtime_s;
  return s;
}

// A heartbeat from an agent that runs `jobs` (attempt 1).
api::Heartbeat Running(const std::vector<std::string>& jobs) {
  api::Heartbeat hb;
  for (const auto& id : jobs) hb.running.push_back({id, 1});
  return hb;
}

api::RegisterRequest Host(const std::string& name, int gpus) {
  api::RegisterRequest r = Machine(name, gpus);
  r.cpus = kCpus;
  r.memory_mb = kMemoryMb;
  return r;
}

// One job runs (1 GPU, 4 CPUs, 8 GiB), a second waits for both GPUs; 100 s
// after the first started, as `tide sim` and the server see it.
TEST_F(CoreTest, TheServersSnapshotHoldsEveryFieldTheSimulatorsDoes) {
  std::optional<sched::replay::SimOptions::PassInput> sim;
  sched::replay::SimOptions options;
  options.on_pass = [&](const sched::replay::SimOptions::PassInput& in) {
    if (!sim && in.now_ms == 110'000) sim = in;
  };
  sched::replay::Simulate({TraceJob("a", 10, 1, 4, 8'192, 2'000), TraceJob("b", 110, 2, 8, 16'384, 500)},
                          {SimNode()}, options);
  ASSERT_TRUE(sim.has_value());

  Caller alice = User("alice");
  std::string node = AddNode(Host("n0", 2));
  auto a = core_->SubmitJob(alice, JobSpecOf(1, 4, 8'192, 2'000), "");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(core_->JobEvent(node, a->first.id, {1, "running", std::nullopt, "", ""}).ok());
  ASSERT_TRUE(core_->RecordCheckpoint(node, a->first.id, 1, 100).ok());
  for (int i = 0; i < 20; ++i) {
    clock_.Advance(5'000);
    ASSERT_TRUE(core_->Heartbeat(node, Running({a->first.id})).ok());
  }
  auto b = core_->SubmitJob(alice, JobSpecOf(2, 8, 16'384, 500), "");
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->first.status, JobStatus::kQueued);
  SchedulerInput server = core_->SchedulerSnapshot();

  ASSERT_EQ(server.nodes.size(), 1u);
  ASSERT_EQ(sim->nodes.size(), 1u);
  const sched::NodeView& sn = sim->nodes[0];
  const sched::NodeView& vn = server.nodes[0];
  EXPECT_EQ(vn.schedulable, sn.schedulable);
  EXPECT_EQ(vn.draining, sn.draining);
  ASSERT_EQ(vn.gpus.size(), sn.gpus.size());
  for (size_t i = 0; i < sn.gpus.size(); ++i) {
    EXPECT_EQ(vn.gpus[i].index, sn.gpus[i].index);
    EXPECT_EQ(vn.gpus[i].model, sn.gpus[i].model);
    EXPECT_EQ(vn.gpus[i].memory_mb, sn.gpus[i].memory_mb);
    EXPECT_EQ(vn.gpus[i].free, sn.gpus[i].free) << "GPU " << i;
  }
  EXPECT_EQ(vn.cpus, sn.cpus);
  EXPECT_EQ(vn.cpus_free, sn.cpus_free);
  EXPECT_EQ(vn.cpus_free, kCpus - 4);
  EXPECT_EQ(vn.memory_mb, sn.memory_mb);
  EXPECT_EQ(vn.memory_free_mb, sn.memory_free_mb);
  EXPECT_EQ(vn.memory_free_mb, kMemoryMb - 8'192);
  EXPECT_EQ(vn.labels, sn.labels);
  EXPECT_EQ(vn.images, sn.images);
  EXPECT_EQ(vn.price, sn.price);
  EXPECT_EQ(vn.reliability, sn.reliability);

  ASSERT_EQ(server.running.size(), 1u);
  ASSERT_EQ(sim->running.size(), 1u);
  const sched::RunningJob& sr = sim->running[0];
  const sched::RunningJob& vr = server.running[0];
  EXPECT_EQ(vr.tier, sr.tier);
  EXPECT_EQ(vr.priority, sr.priority);
  ASSERT_EQ(vr.allocs.size(), sr.allocs.size());
  EXPECT_EQ(vr.allocs[0].gpus, sr.allocs[0].gpus);
  EXPECT_EQ(vr.expected_end - vr.started_at, sr.expected_end - sr.started_at);
  EXPECT_EQ(vr.attained_gpu_s, sr.attained_gpu_s);
  EXPECT_EQ(vr.preemptible, sr.preemptible);
  EXPECT_GT(sr.last_checkpoint, 0);
  EXPECT_GT(vr.last_checkpoint, 0);
  EXPECT_EQ(vr.stopping, sr.stopping);

  ASSERT_EQ(server.queue.size(), 1u);
  ASSERT_EQ(sim->queue.size(), 1u);
  const sched::PendingJob& sq = sim->queue[0];
  const sched::PendingJob& vq = server.queue[0];
  EXPECT_EQ(vq.tier, sq.tier);
  EXPECT_EQ(vq.priority, sq.priority);
  EXPECT_EQ(vq.nodes, sq.nodes);
  EXPECT_EQ(vq.gpu_count, sq.gpu_count);
  EXPECT_EQ(vq.gpu_types, sq.gpu_types);
  EXPECT_EQ(vq.gpu_memory_mb, sq.gpu_memory_mb);
  EXPECT_EQ(vq.cpus, sq.cpus);
  EXPECT_EQ(vq.memory_mb, sq.memory_mb);
  EXPECT_EQ(vq.constraints, sq.constraints);
  EXPECT_EQ(vq.image, sq.image);
  EXPECT_EQ(vq.max_price, sq.max_price);
  EXPECT_EQ(vq.max_runtime_ms, sq.max_runtime_ms);
  EXPECT_EQ(vq.attained_gpu_s, sq.attained_gpu_s);
  EXPECT_EQ(vq.last_run_ms, sq.last_run_ms);
}

TEST_F(CoreTest, AJobAskingForMoreCpusOrMemoryThanAnyNodeWaitsSayingSo) {
  Caller alice = User("alice");
  AddNode(Host("n0", 2));
  auto cpus = core_->SubmitJob(alice, JobSpecOf(1, 32, 0, 60), "");
  ASSERT_TRUE(cpus.ok());
  EXPECT_EQ(cpus->first.status, JobStatus::kQueued);
  EXPECT_NE(cpus->first.pending_reason.find("room for 32.0 CPUs"), std::string::npos)
      << cpus->first.pending_reason;
  auto memory = core_->SubmitJob(alice, JobSpecOf(1, 0, 2 * kMemoryMb, 60), "");
  ASSERT_TRUE(memory.ok());
  EXPECT_EQ(memory->first.status, JobStatus::kQueued);
  EXPECT_NE(memory->first.pending_reason.find("131072 MB of memory"), std::string::npos)
      << memory->first.pending_reason;
  // What fits runs, and holds its share of the host while it does.
  auto fits = core_->SubmitJob(alice, JobSpecOf(1, 12, 0, 60), "");
  EXPECT_EQ(fits->first.status, JobStatus::kStarting);
  auto second = core_->SubmitJob(alice, JobSpecOf(1, 8, 0, 60), "");
  EXPECT_EQ(second->first.status, JobStatus::kQueued) << "12 + 8 CPUs do not fit in 16";
}

TEST_F(CoreTest, ANodeThatLostALeaseIsLessReliableAndPlacedAfterOneThatDidNot) {
  Caller alice = User("alice");
  std::string n1 = AddNode(Host("n1", 1));
  std::string n2 = AddNode(Host("n2", 1));
  auto job = core_->SubmitJob(alice, JobSpecOf(1, 0, 0, 600), "");
  ASSERT_TRUE(job.ok());
  const std::string first = job->first.node_id;
  const std::string other = first == n1 ? n2 : n1;
  ASSERT_TRUE(core_->JobEvent(first, job->first.id, {1, "running", std::nullopt, "", ""}).ok());
  // The first node goes silent and is lost; the job moves to the other.
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(1000);
    ASSERT_TRUE(core_->Heartbeat(other, {}).ok());
  }
  ASSERT_TRUE(Eventually([&] { return core_->GetJob(alice, job->first.id)->node_id == other; }));
  ASSERT_TRUE(core_->Heartbeat(first, {}).ok());  // back
  ASSERT_TRUE(core_->JobEvent(other, job->first.id, {2, "running", std::nullopt, "", ""}).ok());
  ASSERT_TRUE(core_->JobEvent(other, job->first.id, {2, "exited", 0, "", ""}).ok());
  for (const NodeStatus& n : core_->ListNodes()) {
    EXPECT_DOUBLE_EQ(n.reliability, n.node.id == first ? 0.5 : 1.0) << n.node.name;
  }
  // Both free, same price, same fit: the reliable one.
  auto next = core_->SubmitJob(alice, JobSpecOf(1, 0, 0, 600), "");
  EXPECT_EQ(next->first.node_id, other);
  // The history survives a restart.
  Reboot();
  for (const NodeStatus& n : core_->ListNodes()) {
    EXPECT_DOUBLE_EQ(n.reliability, n.node.id == first ? 0.5 : 1.0) << n.node.name;
  }
}

TEST_F(CoreTest, TheVictimIsTheJobCheckpointedLast) {
  Caller alice = User("alice");
  std::string n1 = AddNode(Host("n1", 1));
  std::string n2 = AddNode(Host("n2", 1));
  std::vector<std::string> spot;
  for (int i = 0; i < 2; ++i) {
    api::JobSpec s = JobSpecOf(1, 0, 0, 600);
    s.tier = "spot";
    auto j = core_->SubmitJob(alice, s, "");
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE(core_->JobEvent(j->first.node_id, j->first.id, {1, "running", std::nullopt, "", ""}).ok());
    spot.push_back(j->first.id);
  }
  // The second job checkpointed a moment ago; the first never did.
  clock_.Advance(5'000);
  ASSERT_TRUE(core_->Heartbeat(n1, Running(spot)).ok());
  ASSERT_TRUE(core_->Heartbeat(n2, Running(spot)).ok());
  auto second = core_->GetJob(alice, spot[1]);
  ASSERT_TRUE(core_->RecordCheckpoint(second->node_id, spot[1], 1, 100).ok());
  auto urgent = core_->SubmitJob(alice, JobSpecOf(1, 0, 0, 600), "");
  ASSERT_TRUE(urgent.ok());
  EXPECT_FALSE(core_->GetJob(alice, spot[0])->preempt_requested);
  EXPECT_TRUE(core_->GetJob(alice, spot[1])->preempt_requested)
      << "the job that loses least by stopping is the one checkpointed last";
}

}  // namespace
}  // namespace tide::server
