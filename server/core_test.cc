#include "server/core.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "api/types.h"
#include "scheduler/rank.h"
#include "server/testing/core_fixture.h"

namespace tide::server {
namespace {

using api::JobStatus;
using nlohmann::json;

TEST_F(CoreTest, SubmittedJobIsDurableBeforeReturn) {
  Caller alice = User("alice");
  auto r = core_->SubmitJob(alice, Spec(), "");
  ASSERT_TRUE(r.ok());
  auto rows = store_->LoadAll();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->jobs.size(), 1u);
  EXPECT_EQ(rows->jobs[0].id, r->first.id);
  EXPECT_EQ(r->first.status, JobStatus::kQueued);
  EXPECT_EQ(r->first.pending_reason, "no node is registered");
}

TEST_F(CoreTest, PlacesAndDeliversOnce) {
  Caller alice = User("alice");
  std::string node = AddNode("n1", 4);
  auto job = core_->SubmitJob(alice, Spec(2), "");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->first.status, JobStatus::kStarting);
  EXPECT_EQ(job->first.gpus.size(), 2u);
  auto work = core_->PollWork(node, 0);
  ASSERT_TRUE(work.ok());
  ASSERT_EQ(work->assignments.size(), 1u);
  EXPECT_EQ(work->assignments[0].job.id, job->first.id);
  auto again = core_->PollWork(node, 0);
  EXPECT_TRUE(again->assignments.empty()) << "an assignment is handed out once";
}

TEST_F(CoreTest, LifecycleCompletesAndFreesGpus) {
  Caller alice = User("alice");
  std::string node = AddNode("n1", 1);
  auto a = core_->SubmitJob(alice, Spec(), "");
  auto b = core_->SubmitJob(alice, Spec(), "");
  EXPECT_EQ(core_->GetJob(alice, b->first.id)->status, JobStatus::kQueued);
  EXPECT_EQ(core_->GetJob(alice, b->first.id)->pending_reason,
            "waiting for 1 GPU to be free on one node");
  ASSERT_TRUE(core_->JobEvent(node, a->first.id, {1, "running", std::nullopt, "", ""}).ok());
  EXPECT_EQ(core_->GetJob(alice, a->first.id)->status, JobStatus::kRunning);
  ASSERT_TRUE(core_->JobEvent(node, a->first.id, {1, "exited", 0, "", ""}).ok());
  auto done = core_->GetJob(alice, a->first.id);
  EXPECT_EQ(done->status, JobStatus::kCompleted);
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_EQ(core_->GetJob(alice, b->first.id)->status, JobStatus::kStarting);
}

TEST_F(CoreTest, ASubmissionsPlaceInTheQueueIsProvisionalUntilTheFullPass) {
  Caller alice = User("alice");
  Caller bob = User("bob");
  AddNode("n1", 1);
  ASSERT_TRUE(core_->SubmitJob(alice, Spec(), "").ok());  // runs
  ASSERT_TRUE(core_->SubmitJob(alice, Spec(), "").ok());
  ASSERT_TRUE(core_->SubmitJob(alice, Spec(), "").ok());
  // Let a full pass rank alice's two waiting jobs.
  ASSERT_TRUE(Eventually([&] {
    clock_.Advance(100);
    for (const auto& j : core_->Queue(alice).jobs) {
      if (core_->GetJob(alice, j.id)->pending_reason_provisional) return false;
    }
    return true;
  }));
  // Bob's job is counted last by the pass over new jobs; it says so.
  auto d = core_->SubmitJob(bob, Spec(), "");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->first.status, JobStatus::kQueued);
  EXPECT_TRUE(d->first.pending_reason_provisional) << d->first.pending_reason;
  EXPECT_TRUE(api::ToJson(d->first).value("pending_reason_provisional", false));
  // The next full pass ranks it, and the queue shows the same reason.
  ASSERT_TRUE(Eventually([&] {
    clock_.Advance(100);  // the core's tick
    return !core_->GetJob(bob, d->first.id)->pending_reason_provisional;
  }));
  auto queue = core_->Queue(bob);
  ASSERT_EQ(queue.jobs.size(), 1u);
  EXPECT_EQ(queue.jobs[0].pending_reason, core_->GetJob(bob, d->first.id)->pending_reason);
  EXPECT_FALSE(api::ToJson(*core_->GetJob(bob, d->first.id)).contains("pending_reason_provisional"));
}

TEST_F(CoreTest, NonZeroExitFailsWithReason) {
  Caller alice = User("alice");
  std::string node = AddNode("n1", 1);
  auto a = core_->SubmitJob(alice, Spec(), "");
  ASSERT_TRUE(core_->JobEvent(node, a->first.id, {1, "exited", 3, "", ""}).ok());
  auto j = core_->GetJob(alice, a->first.id);
  EXPECT_EQ(j->status, JobStatus::kFailed);
  EXPECT_EQ(j->reason, "exit_code:3");
}

TEST_F(CoreTest, OtherUsersSeeNotFound) {
  Caller alice = User("alice");
  Caller bob = User("bob");
  auto a = core_->SubmitJob(alice, Spec(), "");
  EXPECT_TRUE(core_->GetJob(bob, a->first.id).status().IsNotFound());
  EXPECT_TRUE(core_->CancelJob(bob, a->first.id).status().IsNotFound());
  EXPECT_TRUE(core_->ListJobs(bob, "", "", 100, "").first.empty());
  EXPECT_EQ(core_->ListJobs(alice, "", "", 100, "").first.size(), 1u);
}

TEST_F(CoreTest, CancelQueuedIsImmediateRunningIsOrdered) {
  Caller alice = User("alice");
  std::string node = AddNode("n1", 1);
  auto running = core_->SubmitJob(alice, Spec(), "");
  auto queued = core_->SubmitJob(alice, Spec(), "");
  EXPECT_EQ(core_->CancelJob(alice, queued->first.id)->status, JobStatus::kCancelled);
  ASSERT_EQ(core_->PollWork(node, 0)->assignments.size(), 1u);  // the agent has it
  auto c = core_->CancelJob(alice, running->first.id);
  EXPECT_TRUE(c->cancel_requested);
  auto work = core_->PollWork(node, 0);
  ASSERT_EQ(work->cancels.size(), 1u);
  EXPECT_EQ(work->cancels[0].reason, "cancelled");
  ASSERT_TRUE(core_->JobEvent(node, running->first.id, {1, "exited", 143, "cancelled", ""}).ok());
  EXPECT_EQ(core_->GetJob(alice, running->first.id)->status, JobStatus::kCancelled);
}

// A queued job's cancel frees nothing, so the pass it may unblock runs at
// the next tick instead of once per cancel: what it unblocks still starts.
TEST_F(CoreTest, CancellingAQueuedJobUnblocksItsDependentsAtTheNextTick) {
  Caller alice = User("alice");
  AddNode("n1", 1);
  auto blocker = core_->SubmitJob(alice, Spec(8), "");  // no node has 8 GPUs
  ASSERT_TRUE(blocker.ok());
  api::JobSpec after = Spec();
  after.depends_on = {{"afterany", blocker->first.id}};
  auto dependent = core_->SubmitJob(alice, after, "");
  ASSERT_TRUE(dependent.ok());
  EXPECT_EQ(dependent->first.status, JobStatus::kQueued);
  EXPECT_EQ(core_->CancelJob(alice, blocker->first.id)->status, JobStatus::kCancelled);
  ASSERT_TRUE(Eventually([&] {
    clock_.Advance(100);  // the core's tick
    return core_->GetJob(alice, dependent->first.id)->status == JobStatus::kStarting;
  }));
}

TEST_F(CoreTest, CancelBeforeTheAgentHasItEndsAtOnce) {
  Caller alice = User("alice");
  std::string node = AddNode("n1", 1);
  auto placed = core_->SubmitJob(alice, Spec(), "");
  auto waiting = core_->SubmitJob(alice, Spec(), "");
  ASSERT_EQ(placed->first.status, JobStatus::kStarting);
  auto c = core_->CancelJob(alice, placed->first.id);
  EXPECT_EQ(c->status, JobStatus::kCancelled);
  EXPECT_TRUE(core_->PollWork(node, 0)->cancels.empty());
  // Its GPU went to the next job.
  EXPECT_EQ(core_->GetJob(alice, waiting->first.id)->status, JobStatus::kStarting);
}

TEST_F(CoreTest, LostNodeRequeuesWithNextAttempt) {
  Caller alice = User("alice");
  std::string n1 = AddNode("n1", 1);
  auto job = core_->SubmitJob(alice, Spec(), "");
  ASSERT_TRUE(core_->JobEvent(n1, job->first.id, {1, "running", std::nullopt, "", ""}).ok());
  std::string n2 = AddNode("n2", 1);
  // n2 keeps heartbeating, n1 goes silent.
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(1000);
    ASSERT_TRUE(core_->Heartbeat(n2, {}).ok());
  }
  ASSERT_TRUE(Eventually([&] { return core_->GetJob(alice, job->first.id)->attempt == 2; }));
  auto j = core_->GetJob(alice, job->first.id);
  EXPECT_EQ(j->status, JobStatus::kStarting);
  EXPECT_EQ(j->node_id, n2);
  ASSERT_EQ(j->attempts.size(), 2u);
  EXPECT_EQ(j->attempts[0].reason, "node_lost");
  // The old node's late report is refused; it must stop the job.
  EXPECT_EQ(core_->JobEvent(n1, job->first.id, {1, "exited", 0, "", ""}).code(), Code::kConflict);
}

TEST_F(CoreTest, HeartbeatCancelsJobsNotLeased) {
  std::string node = AddNode("n1", 1);
  api::Heartbeat hb;
  hb.running.push_back({"j-unknown", 1});
  auto work = core_->Heartbeat(node, hb);
  ASSERT_EQ(work->cancels.size(), 1u);
  EXPECT_EQ(work->cancels[0].job_id, "j-unknown");
}

TEST_F(CoreTest, PreemptedSpotJobRequeuesOnlyWhenItStoppedForThePreemption) {
  Caller alice = User("alice");
  std::string node = AddNode("n1", 2);
  auto start_spot = [&]() {
    api::JobSpec spot = Spec(2);
    spot.tier = "spot";
    auto s = core_->SubmitJob(alice, spot, "");
    EXPECT_TRUE(s.ok());
    EXPECT_EQ(core_->PollWork(node, 0)->assignments.size(), 1u);
    EXPECT_TRUE(core_->JobEvent(node, s->first.id, {1, "running", std::nullopt, "", ""}).ok());
    return s->first.id;
  };
  // The spot job stops for the on-demand one and comes back as attempt 2.
  std::string spot = start_spot();
  auto urgent = core_->SubmitJob(alice, Spec(2), "");
  ASSERT_TRUE(urgent.ok());
  EXPECT_EQ(urgent->first.status, JobStatus::kQueued);
  EXPECT_TRUE(core_->GetJob(alice, spot)->preempt_requested);
  auto work = core_->PollWork(node, 0);
  ASSERT_EQ(work->cancels.size(), 1u);
  EXPECT_EQ(work->cancels[0].reason, "preempted");
  ASSERT_TRUE(core_->JobEvent(node, spot, {1, "exited", 143, "preempted", ""}).ok());
  auto requeued = core_->GetJob(alice, spot);
  EXPECT_EQ(requeued->status, JobStatus::kQueued);
  EXPECT_EQ(requeued->attempt, 2);
  EXPECT_EQ(requeued->reason, "preempted");
  EXPECT_FALSE(requeued->preempt_requested);
  EXPECT_EQ(core_->GetJob(alice, urgent->first.id)->status, JobStatus::kStarting);
  ASSERT_TRUE(core_->CancelJob(alice, spot).ok());
  ASSERT_TRUE(core_->CancelJob(alice, urgent->first.id).ok());  // never delivered: ends at once

  // A spot job that finished on its own before the notice arrived is done,
  // not run again.
  std::string done = start_spot();
  auto second = core_->SubmitJob(alice, Spec(2), "");
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(core_->GetJob(alice, done)->preempt_requested);
  ASSERT_TRUE(core_->JobEvent(node, done, {1, "exited", 0, "", ""}).ok());
  auto finished = core_->GetJob(alice, done);
  EXPECT_EQ(finished->status, JobStatus::kCompleted);
  EXPECT_EQ(finished->attempt, 1);
}

api::JobSpec Gang(int nodes, int gpus_per_node) {
  api::JobSpec s = Spec(gpus_per_node);
  s.resources.nodes = nodes;
  return s;
}

TEST_F(CoreTest, GangStartsOnAllItsNodesAtOnceWithOneRendezvous) {
  Caller alice = User("alice");
  std::string a = AddNode("a", 2, "10.0.0.1");
  auto waiting = core_->SubmitJob(alice, Gang(2, 2), "");
  ASSERT_TRUE(waiting.ok());
  // One node is not enough: it waits whole, holding nothing.
  EXPECT_EQ(waiting->first.status, JobStatus::kQueued);
  EXPECT_TRUE(core_->PollWork(a, 0)->assignments.empty());
  std::string b = AddNode("b", 2, "10.0.0.2");
  ASSERT_TRUE(Eventually([&] { return core_->GetJob(alice, waiting->first.id)->status == JobStatus::kStarting; }));
  const std::string id = waiting->first.id;
  auto job = core_->GetJob(alice, id);
  ASSERT_EQ(job->attempts.size(), 1u);
  const api::Attempt& at = job->attempts[0];
  ASSERT_EQ(at.ranks.size(), 2u);
  EXPECT_EQ(at.node_id, at.ranks[0].node_id);
  EXPECT_NE(at.ranks[0].node_id, at.ranks[1].node_id);
  EXPECT_GE(at.master_port, kMasterPortBase);
  EXPECT_LT(at.master_port, kMasterPortBase + kMasterPorts);
  std::string rank0 = at.ranks[0].node_id;
  std::string rank1 = at.ranks[1].node_id;
  EXPECT_EQ(at.master_addr, rank0 == a ? "10.0.0.1" : "10.0.0.2");

  // Each node gets its own part, with the same rendezvous.
  auto w0 = core_->PollWork(rank0, 0);
  auto w1 = core_->PollWork(rank1, 0);
  ASSERT_EQ(w0->assignments.size(), 1u);
  ASSERT_EQ(w1->assignments.size(), 1u);
  EXPECT_EQ(w0->assignments[0].gang.rank, 0);
  EXPECT_EQ(w1->assignments[0].gang.rank, 1);
  EXPECT_EQ(w1->assignments[0].gang.nnodes, 2);
  EXPECT_EQ(w1->assignments[0].gang.master_addr, at.master_addr);
  EXPECT_EQ(w1->assignments[0].gang.master_port, at.master_port);
  EXPECT_EQ(w1->assignments[0].job.node_id, rank1);
  EXPECT_EQ(w1->assignments[0].job.gpus, at.ranks[1].gpus);
  EXPECT_EQ(*core_->CheckAgentJob(rank1, id, 1), 1);
  EXPECT_EQ(*core_->CheckAgentJob(rank0, id, 1, /*current_only=*/true), 0);

  // Running once every rank runs; completed once every rank exits 0.
  ASSERT_TRUE(core_->JobEvent(rank0, id, {1, "running", std::nullopt, "", ""}).ok());
  EXPECT_EQ(core_->GetJob(alice, id)->status, JobStatus::kStarting);
  ASSERT_TRUE(core_->JobEvent(rank1, id, {1, "running", std::nullopt, "", ""}).ok());
  EXPECT_EQ(core_->GetJob(alice, id)->status, JobStatus::kRunning);
  clock_.Advance(5'000);
  ASSERT_TRUE(core_->JobEvent(rank1, id, {1, "exited", 0, "", ""}).ok());
  EXPECT_EQ(core_->GetJob(alice, id)->status, JobStatus::kRunning);
  ASSERT_TRUE(core_->JobEvent(rank0, id, {1, "exited", 0, "", ""}).ok());
  auto done = core_->GetJob(alice, id);
  EXPECT_EQ(done->status, JobStatus::kCompleted);
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_DOUBLE_EQ(api::AttemptGpuSeconds(done->attempts[0], 0), 20.0);  // 2 nodes x 2 GPUs x 5 s
  for (const auto& n : core_->ListNodes()) EXPECT_TRUE(n.leases.empty()) << n.node.name;
}

TEST_F(CoreTest, OneFailedRankStopsTheGangAndFailsTheJob) {
  Caller alice = User("alice");
  std::string a = AddNode("a", 1);
  std::string b = AddNode("b", 1);
  auto gang = core_->SubmitJob(alice, Gang(2, 1), "");
  ASSERT_EQ(gang->first.status, JobStatus::kStarting);
  const std::string id = gang->first.id;
  auto at = gang->first.attempts.at(0);
  std::string rank0 = at.ranks[0].node_id;
  std::string rank1 = at.ranks[1].node_id;
  ASSERT_EQ(core_->PollWork(rank0, 0)->assignments.size(), 1u);
  ASSERT_EQ(core_->PollWork(rank1, 0)->assignments.size(), 1u);
  ASSERT_TRUE(core_->JobEvent(rank0, id, {1, "running", std::nullopt, "", ""}).ok());
  ASSERT_TRUE(core_->JobEvent(rank1, id, {1, "running", std::nullopt, "", ""}).ok());
  ASSERT_TRUE(core_->JobEvent(rank1, id, {1, "exited", 3, "", ""}).ok());
  // Rank 0 gets the notice; the job is not over until it has stopped.
  auto work = core_->PollWork(rank0, 0);
  ASSERT_EQ(work->cancels.size(), 1u);
  EXPECT_EQ(work->cancels[0].reason, "gang_failed");
  EXPECT_EQ(core_->GetJob(alice, id)->status, JobStatus::kRunning);
  // Rank 1's GPU is free already: another job can start there.
  auto next = core_->SubmitJob(alice, Spec(1), "");
  EXPECT_EQ(next->first.status, JobStatus::kStarting);
  EXPECT_EQ(next->first.node_id, rank1);
  ASSERT_TRUE(core_->JobEvent(rank0, id, {1, "exited", 143, "gang_failed", ""}).ok());
  auto failed = core_->GetJob(alice, id);
  EXPECT_EQ(failed->status, JobStatus::kFailed);
  EXPECT_EQ(failed->reason, "exit_code:3");
  EXPECT_EQ(failed->exit_code, 3);
  EXPECT_EQ(failed->attempts[0].ranks[1].exit_code, 3);
  EXPECT_EQ(failed->attempts[0].ranks[0].reason, "gang_failed");
}

TEST_F(CoreTest, RanksNoAgentHasYetEndAtOnceWhenTheGangStops) {
  Caller alice = User("alice");
  AddNode("a", 1);
  AddNode("b", 1);
  // Rank 1 fails before rank 0's agent ever asked for its part.
  auto gang = core_->SubmitJob(alice, Gang(2, 1), "");
  std::string id = gang->first.id;
  auto at = gang->first.attempts.at(0);
  ASSERT_EQ(core_->PollWork(at.ranks[1].node_id, 0)->assignments.size(), 1u);
  ASSERT_TRUE(core_->JobEvent(at.ranks[1].node_id, id, {1, "exited", 4, "", ""}).ok());
  auto failed = core_->GetJob(alice, id);
  EXPECT_EQ(failed->status, JobStatus::kFailed);
  EXPECT_EQ(failed->reason, "exit_code:4");
  EXPECT_TRUE(core_->PollWork(at.ranks[0].node_id, 0)->assignments.empty());

  // A cancel with one rank handed out: the other ends here, the job once
  // the handed-out one has stopped.
  gang = core_->SubmitJob(alice, Gang(2, 1), "");
  id = gang->first.id;
  at = gang->first.attempts.at(0);
  ASSERT_EQ(core_->PollWork(at.ranks[0].node_id, 0)->assignments.size(), 1u);
  ASSERT_TRUE(core_->CancelJob(alice, id).ok());
  EXPECT_TRUE(core_->PollWork(at.ranks[1].node_id, 0)->cancels.empty());
  ASSERT_EQ(core_->PollWork(at.ranks[0].node_id, 0)->cancels.size(), 1u);
  ASSERT_TRUE(core_->JobEvent(at.ranks[0].node_id, id, {1, "exited", 143, "cancelled", ""}).ok());
  EXPECT_EQ(core_->GetJob(alice, id)->status, JobStatus::kCancelled);
  for (const auto& n : core_->ListNodes()) EXPECT_TRUE(n.leases.empty()) << n.node.name;
}

TEST_F(CoreTest, LostNodeRequeuesTheWholeGang) {
  Caller alice = User("alice");
  std::string a = AddNode("a", 1);
  std::string b = AddNode("b", 1);
  auto gang = core_->SubmitJob(alice, Gang(2, 1), "");
  const std::string id = gang->first.id;
  auto at = gang->first.attempts.at(0);
  std::string rank0 = at.ranks[0].node_id;
  std::string rank1 = at.ranks[1].node_id;
  ASSERT_TRUE(core_->JobEvent(rank0, id, {1, "running", std::nullopt, "", ""}).ok());
  ASSERT_TRUE(core_->JobEvent(rank1, id, {1, "running", std::nullopt, "", ""}).ok());
  // Rank 1's node goes silent; rank 0's keeps reporting its part.
  api::Heartbeat hb;
  hb.running.push_back({id, 1});
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(1000);
    ASSERT_TRUE(core_->Heartbeat(rank0, hb).ok());
  }
  // The surviving rank gets the notice, with its grace, and keeps its GPUs
  // until it has stopped.
  ASSERT_TRUE(Eventually([&] { return core_->GetJob(alice, id)->requeue_reason == "node_lost"; }));
  auto work = core_->Heartbeat(rank0, hb);
  ASSERT_EQ(work->cancels.size(), 1u);
  EXPECT_EQ(work->cancels[0].reason, "node_lost");
  EXPECT_EQ(work->cancels[0].grace_s, 30);
  auto next = core_->SubmitJob(alice, Spec(1), "");
  EXPECT_EQ(next->first.status, JobStatus::kQueued) << "rank 0's GPU is still in use";
  ASSERT_TRUE(core_->CancelJob(alice, next->first.id).ok());
  ASSERT_TRUE(core_->JobEvent(rank0, id, {1, "exited", 143, "node_lost", ""}).ok());
  auto j = core_->GetJob(alice, id);
  EXPECT_EQ(j->attempt, 2);
  EXPECT_EQ(j->status, JobStatus::kQueued);  // one node left: waits for two
  EXPECT_EQ(j->reason, "node_lost");
  EXPECT_EQ(j->attempts[0].ranks[1].reason, "node_lost");
  for (const auto& n : core_->ListNodes()) EXPECT_TRUE(n.leases.empty()) << n.node.name;
}

TEST_F(CoreTest, AFailingGangStaysFailedWhenAnotherPartIsLost) {
  Caller alice = User("alice");
  std::string a = AddNode("a", 1);
  std::string b = AddNode("b", 1);
  auto gang = core_->SubmitJob(alice, Gang(2, 1), "");
  const std::string id = gang->first.id;
  for (const auto& node : {a, b}) {
    ASSERT_EQ(core_->PollWork(node, 0)->assignments.size(), 1u);
    ASSERT_TRUE(core_->JobEvent(node, id, {1, "running", std::nullopt, "", ""}).ok());
  }
  ASSERT_TRUE(core_->JobEvent(b, id, {1, "exited", 2, "", ""}).ok());
  // Rank 0's agent stops before it reports its exit.
  ASSERT_TRUE(core_->JobEvent(a, id, {1, "exited", 143, "agent_shutdown", ""}).ok());
  auto j = core_->GetJob(alice, id);
  EXPECT_EQ(j->status, JobStatus::kFailed);
  EXPECT_EQ(j->reason, "exit_code:2");
  EXPECT_EQ(j->attempt, 1);
}

TEST_F(CoreTest, StoppingARunningGangAfterARestartGivesEveryRankItsNotice) {
  Caller alice = User("alice");
  std::string a = AddNode("a", 1);
  std::string b = AddNode("b", 1);
  auto gang = core_->SubmitJob(alice, Gang(2, 1), "");
  const std::string id = gang->first.id;
  for (const auto& node : {a, b}) {
    ASSERT_EQ(core_->PollWork(node, 0)->assignments.size(), 1u);
    ASSERT_TRUE(core_->JobEvent(node, id, {1, "running", std::nullopt, "", ""}).ok());
  }
  Reboot();  // what was delivered is forgotten; what runs is known
  auto c = core_->CancelJob(alice, id);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->status, JobStatus::kRunning) << "not ended before the ranks stop";
  for (const auto& node : {a, b}) {
    auto work = core_->PollWork(node, 0);
    ASSERT_EQ(work->cancels.size(), 1u) << node;
    EXPECT_EQ(work->cancels[0].reason, "cancelled");
  }
}

TEST_F(CoreTest, PreemptedGangRequeuesOnceEveryRankStopped) {
  Caller alice = User("alice");
  std::string a = AddNode("a", 1);
  std::string b = AddNode("b", 1);
  api::JobSpec spot = Gang(2, 1);
  spot.tier = "spot";
  auto gang = core_->SubmitJob(alice, spot, "");
  const std::string id = gang->first.id;
  for (const auto& node : {a, b}) {
    ASSERT_EQ(core_->PollWork(node, 0)->assignments.size(), 1u);
    ASSERT_TRUE(core_->JobEvent(node, id, {1, "running", std::nullopt, "", ""}).ok());
  }
  auto urgent = core_->SubmitJob(alice, Spec(1), "");
  ASSERT_TRUE(core_->GetJob(alice, id)->preempt_requested);
  for (const auto& node : {a, b}) {
    auto work = core_->PollWork(node, 0);
    ASSERT_EQ(work->cancels.size(), 1u);
    EXPECT_EQ(work->cancels[0].reason, "preempted");
  }
  ASSERT_TRUE(core_->JobEvent(a, id, {1, "exited", 143, "preempted", ""}).ok());
  EXPECT_EQ(core_->GetJob(alice, id)->attempt, 1);
  ASSERT_TRUE(core_->JobEvent(b, id, {1, "exited", 143, "preempted", ""}).ok());
  auto j = core_->GetJob(alice, id);
  EXPECT_EQ(j->attempt, 2);
  EXPECT_EQ(j->reason, "preempted");
  EXPECT_EQ(core_->GetJob(alice, urgent->first.id)->status, JobStatus::kStarting);
}

TEST_F(CoreTest, GangSurvivesRestart) {
  Caller alice = User("alice");
  std::string a = AddNode("a", 1);
  std::string b = AddNode("b", 1);
  auto gang = core_->SubmitJob(alice, Gang(2, 1), "");
  const std::string id = gang->first.id;
  ASSERT_TRUE(core_->JobEvent(a, id, {1, "running", std::nullopt, "", ""}).ok());
  ASSERT_TRUE(core_->JobEvent(b, id, {1, "running", std::nullopt, "", ""}).ok());
  ASSERT_TRUE(core_->JobEvent(b, id, {1, "exited", 0, "", ""}).ok());
  Reboot();
  // The live rank's lease is back, the finished one's is not.
  std::map<std::string, size_t> leases;
  for (const auto& n : core_->ListNodes()) leases[n.node.id] = n.leases.size();
  EXPECT_EQ(leases[a], 1u);
  EXPECT_EQ(leases[b], 0u);
  ASSERT_TRUE(core_->JobEvent(a, id, {1, "exited", 0, "", ""}).ok());
  EXPECT_EQ(core_->GetJob(alice, id)->status, JobStatus::kCompleted);
}

TEST_F(CoreTest, HeavierAccountsGetTheirShareFirstAndWeightsPersist) {
  Caller heavy = User("heavy");
  Caller light = User("light");
  ASSERT_TRUE(core_->SetWeight(AdminCaller(), heavy.subject, 4).ok());
  EXPECT_EQ(core_->SetWeight(AdminCaller(), heavy.subject, 0).field(), "weight");
  EXPECT_TRUE(core_->SetWeight(AdminCaller(), "u-nobody", 2).IsNotFound());
  // Both use the one GPU for 5 s; then the next job of the heavier weight
  // goes first, though it was submitted later.
  std::string node = AddNode("n1", 1);
  auto a = core_->SubmitJob(light, Spec(), "");
  auto b = core_->SubmitJob(heavy, Spec(), "");
  for (const auto& id : {a->first.id, b->first.id}) {
    ASSERT_TRUE(Eventually([&] {
      return core_->GetJob(Caller{Scope::kAdmin, "admin"}, id)->status == JobStatus::kStarting;
    }));
    ASSERT_TRUE(core_->JobEvent(node, id, {1, "running", std::nullopt, "", ""}).ok());
    clock_.Advance(5'000);
    ASSERT_TRUE(core_->Heartbeat(node, {}).ok());
    if (id == b->first.id) break;
    ASSERT_TRUE(core_->JobEvent(node, id, {1, "exited", 0, "", ""}).ok());
  }
  auto l = core_->SubmitJob(light, Spec(), "");
  auto h = core_->SubmitJob(heavy, Spec(), "");
  // While heavy's job holds the GPU, the standings show why light would be
  // served next: a held GPU counts as an hour of usage (FairShareScore).
  UserStandings st = core_->Users();
  ASSERT_EQ(st.users.size(), 2u);
  const UserStanding& hs = st.users[0];  // by name: heavy, light
  const UserStanding& ls = st.users[1];
  ASSERT_EQ(hs.user.name, "heavy");
  EXPECT_DOUBLE_EQ(hs.weight, 4);
  EXPECT_DOUBLE_EQ(hs.share, 0.8);
  EXPECT_EQ(hs.running_jobs, 1);
  EXPECT_EQ(hs.running_gpus, 1);
  EXPECT_EQ(hs.queued_jobs, 1);
  EXPECT_EQ(ls.running_gpus, 0);
  EXPECT_EQ(ls.queued_gpus, 1);
  EXPECT_GT(ls.usage_gpu_s, 0);
  EXPECT_NEAR(hs.usage_share + ls.usage_share, 1.0, 1e-9);
  EXPECT_DOUBLE_EQ(hs.score, sched::FairShareScore(hs.usage_gpu_s, 1, 4));
  EXPECT_EQ(ls.rank, 1);
  EXPECT_EQ(hs.rank, 2);
  EXPECT_EQ(st.half_life_ms, 7LL * 24 * 3600 * 1000);
  ASSERT_TRUE(core_->JobEvent(node, b->first.id, {1, "exited", 0, "", ""}).ok());
  EXPECT_EQ(core_->GetJob(heavy, h->first.id)->status, JobStatus::kStarting);
  EXPECT_EQ(core_->GetJob(light, l->first.id)->status, JobStatus::kQueued);
  Reboot();
  EXPECT_DOUBLE_EQ(core_->Weight(heavy.subject), 4.0);
  EXPECT_DOUBLE_EQ(core_->Weight(light.subject), 1.0);
}

TEST_F(CoreTest, ANodesTelemetryIsItsProvidersAndTheOperatorsOnly) {
  Caller carol = User("carol");
  Caller alice = User("alice");
  std::string node = AddNode(Machine("rig", 2), carol.subject);
  api::Heartbeat hb;
  hb.gpus = Machine("rig", 2).gpus;
  for (auto& g : hb.gpus) g.utilization_pct = 40;
  ASSERT_TRUE(core_->Heartbeat(node, hb).ok());
  auto mine = core_->NodeTelemetry(carol, "rig", true);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_EQ(mine->node_id, node);
  ASSERT_EQ(mine->gpus.size(), 2u);
  EXPECT_EQ(mine->gpus[1].now.utilization_pct, 40);
  EXPECT_TRUE(core_->NodeTelemetry(AdminCaller(), node, false).ok());
  EXPECT_TRUE(core_->NodeTelemetry(alice, node, true).status().IsNotFound());
  EXPECT_TRUE(core_->NodeTelemetry(carol, "n-nothing", true).status().IsNotFound());
}

TEST_F(CoreTest, IdempotencyKeyCreatesOnce) {
  Caller alice = User("alice");
  auto a = core_->SubmitJob(alice, Spec(), "key-1");
  auto b = core_->SubmitJob(alice, Spec(), "key-1");
  EXPECT_TRUE(a->second);
  EXPECT_FALSE(b->second);
  EXPECT_EQ(a->first.id, b->first.id);
  Caller bob = User("bob");
  auto c = core_->SubmitJob(bob, Spec(), "key-1");
  EXPECT_NE(c->first.id, a->first.id) << "keys are per user";
}

TEST_F(CoreTest, StateSurvivesRestart) {
  Caller alice = User("alice");
  std::string node = AddNode("n1", 2);
  auto job = core_->SubmitJob(alice, Spec(), "");
  ASSERT_TRUE(core_->JobEvent(node, job->first.id, {1, "running", std::nullopt, "", ""}).ok());
  Reboot();
  auto j = core_->GetJob(alice, job->first.id);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->status, JobStatus::kRunning);
  // The lease is back: the node's report is accepted.
  EXPECT_TRUE(core_->JobEvent(node, job->first.id, {1, "exited", 0, "", ""}).ok());
  EXPECT_EQ(core_->GetJob(alice, job->first.id)->status, JobStatus::kCompleted);
}

TEST_F(CoreTest, SecretsReachTheAgentButNotTheRecordOrTheAnswer) {
  Caller alice = User("alice");
  api::JobSpec spec = Spec();
  spec.secrets = {{"HF_TOKEN", "hf_value_1234"}};
  auto queued = core_->SubmitJob(alice, spec, "");
  ASSERT_TRUE(queued.ok());
  const std::string id = queued->first.id;
  // The job rows, and the secrets rows, as the store holds them.
  auto stored = [&] {
    auto rows = store_->LoadAll();
    std::string jobs, secrets;
    for (const auto& j : rows->jobs) jobs += j.doc;
    for (const auto& b : rows->secrets) secrets += b.job_id + "=" + b.doc + ";";
    return std::make_pair(jobs, secrets);
  };
  EXPECT_EQ(api::ToJson(*core_->GetJob(alice, id))["secrets"], json({"HF_TOKEN"}));
  EXPECT_EQ(api::ToJson(*core_->GetJob(alice, id)).dump().find("hf_value_1234"), std::string::npos);
  auto [jobs, secrets] = stored();
  EXPECT_EQ(jobs.find("hf_value_1234"), std::string::npos) << jobs;
  EXPECT_NE(jobs.find("HF_TOKEN"), std::string::npos) << "the record names it";
  EXPECT_EQ(secrets, id + "=" + R"({"HF_TOKEN":"hf_value_1234"})" + ";");
  // A restart reads the values back; the agent is handed them.
  Reboot();
  std::string node = AddNode("n1", 1);
  auto work = core_->PollWork(node, 0);
  ASSERT_EQ(work->assignments.size(), 1u);
  EXPECT_EQ(work->assignments[0].job.spec.secrets.at("HF_TOKEN"), "hf_value_1234");
  EXPECT_EQ(api::ToJson(*work)["assignments"][0]["secrets"]["HF_TOKEN"], "hf_value_1234");
  // Once the job has ended its row is gone and so are the values.
  ASSERT_TRUE(core_->JobEvent(node, id, {1, "exited", 0, "", ""}).ok());
  EXPECT_EQ(stored().second, "");
  EXPECT_EQ(core_->GetJob(alice, id)->spec.secrets.at("HF_TOKEN"), "");
  Reboot();
  EXPECT_EQ(api::ToJson(*core_->GetJob(alice, id))["secrets"], json({"HF_TOKEN"}));
}

// Deletion keeps the billing record and hands the blobs to the deleter
// once the tombstone is durable; the code archive goes with its last job.
class DeletionTest : public CoreTest {
 protected:
  void SetUp() override {
    blob_deleter_ = [this](const std::vector<DeletedBlobs>& d) {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& b : d) {
        EXPECT_TRUE(Durable(b.job_id)) << "blobs go only after the deletion is written";
        deleted_.push_back(b.job_id.empty() ? "code " + b.code : b.job_id);
      }
    };
    CoreTest::SetUp();
  }
  bool Durable(const std::string& id) {
    if (id.empty()) return true;
    auto rows = store_->LoadAll();
    for (const auto& row : rows->jobs) {
      if (row.id == id) return row.doc.find("\"deleted_at\"") != std::string::npos;
    }
    return false;
  }
  std::vector<std::string> Deleted() {
    std::lock_guard<std::mutex> lock(mu_);
    return deleted_;
  }
  std::mutex mu_;
  std::vector<std::string> deleted_;
};

TEST_F(DeletionTest, RmKeepsTheBillingRecordOnly) {
  Caller alice = User("alice");
  Caller bob = User("bob");
  std::string node = AddNode("n1", 1);
  api::JobSpec spec = Spec();
  spec.name = "secret-project";
  spec.command = {"python", "train.py", "--data", "s3://private"};
  spec.env = {{"A", "1"}};
  spec.tags = {"team-x"};
  spec.code = std::string(64, 'c');
  auto a = core_->SubmitJob(alice, spec, "");
  auto b = core_->SubmitJob(alice, spec, "");  // the same code, queued behind
  const std::string id = a->first.id;
  EXPECT_EQ(core_->DeleteJob(alice, id).status().code(), Code::kConflict) << "still running";
  ASSERT_TRUE(core_->JobEvent(node, id, {1, "exited", 0, "", ""}).ok());
  EXPECT_TRUE(core_->DeleteJob(bob, id).status().IsNotFound());
  auto gone = core_->DeleteJob(alice, id);
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  EXPECT_GT(gone->deleted_at, 0);
  EXPECT_EQ(gone->status, JobStatus::kCompleted);
  EXPECT_TRUE(gone->spec.command.empty());
  EXPECT_TRUE(gone->spec.name.empty());
  EXPECT_TRUE(gone->spec.env.empty());
  EXPECT_TRUE(gone->spec.code.empty());
  EXPECT_EQ(gone->spec.tags, std::vector<std::string>{"team-x"});
  ASSERT_EQ(gone->attempts.size(), 1u) << "the attempts are what it was billed for";
  EXPECT_EQ(Deleted(), std::vector<std::string>{id}) << "b still uses the code archive";
  std::string record;
  auto rows = store_->LoadAll();
  for (const auto& row : rows->jobs) {
    if (row.id == id) record = row.doc;
  }
  EXPECT_EQ(record.find("s3://private"), std::string::npos) << record;
  EXPECT_EQ(record.find("secret-project"), std::string::npos) << record;
  // Again: not an error, nothing more to delete.
  ASSERT_TRUE(core_->DeleteJob(alice, id).ok());
  EXPECT_EQ(Deleted().size(), 1u);
  // The last job with the archive takes it along.
  ASSERT_TRUE(core_->CancelJob(alice, b->first.id).ok());
  ASSERT_TRUE(Eventually([&] { return api::IsTerminal(core_->GetJob(alice, b->first.id)->status); }));
  ASSERT_TRUE(core_->DeleteJob(AdminCaller(), b->first.id).ok());
  EXPECT_EQ(Deleted(), (std::vector<std::string>{id, b->first.id, "code " + spec.code}));
  auto log = core_->AuditLog(0, 1000);
  int deletes = 0;
  for (const auto& e : log) deletes += e.action == "job.delete";
  EXPECT_EQ(deletes, 2);
  EXPECT_EQ(log.back().actor, "admin");
  EXPECT_EQ(log.back().target, b->first.id);
  Reboot();
  EXPECT_GT(core_->GetJob(alice, id)->deleted_at, 0);
  EXPECT_EQ(core_->DeletedJobs().size(), 2u);
}

TEST_F(DeletionTest, RetentionDeletesWhatEndedLongEnoughAgo) {
  options_.retention_ms = 3'600'000;
  Reboot();
  Caller alice = User("alice");
  auto old_job = core_->SubmitJob(alice, Spec(), "");
  ASSERT_TRUE(core_->CancelJob(alice, old_job->first.id).ok());
  clock_.Advance(3'000'000);
  auto young = core_->SubmitJob(alice, Spec(), "");
  ASSERT_TRUE(core_->CancelJob(alice, young->first.id).ok());
  auto queued = core_->SubmitJob(alice, Spec(), "");  // never ends: never deleted
  clock_.Advance(700'000);
  ASSERT_TRUE(Eventually([&] {
    clock_.Advance(20);
    return !Deleted().empty();
  }));
  EXPECT_EQ(Deleted(), std::vector<std::string>{old_job->first.id});
  EXPECT_EQ(core_->GetJob(alice, young->first.id)->deleted_at, 0);
  EXPECT_EQ(core_->GetJob(alice, queued->first.id)->deleted_at, 0);
  EXPECT_EQ(core_->AuditLog(0, 1).back().actor, "server");
}

TEST_F(CoreTest, TokensAreStoredHashed) {
  auto u = core_->CreateUser(AdminCaller(), "carol");
  auto rows = store_->LoadAll();
  for (auto& t : rows->tokens) EXPECT_NE(t.hash, u->second);
  EXPECT_TRUE(core_->Authenticate(u->second).ok());
  EXPECT_EQ(core_->Authenticate("tide_u_nope").status().code(), Code::kUnauthenticated);
  EXPECT_EQ(core_->CreateUser(AdminCaller(), "carol").status().code(), Code::kConflict);
}

}  // namespace
}  // namespace tide::server
