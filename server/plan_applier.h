// PlanApplier: the scheduler's side of the server. It builds the snapshot
// the pure scheduler (scheduler/) sees from the server's state — the same
// fields `tide sim` fills — runs a pass, and applies the plan: each
// preemption becomes a notice, each placement is re-checked against the
// state and becomes a lease and a new attempt, each waiting job gets its
// pending reason.
//
// A full pass ranks the whole queue. After a batch of nothing but new
// submissions, a pass over just the new jobs is enough to place them (see
// Pass). The core tells it what changed; it decides which pass is due.
//
// Not thread-safe on its own: the core's state lock guards it (exclusive
// for a pass, shared for a snapshot).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "scheduler/fair_share.h"
#include "scheduler/plan.h"
#include "scheduler/snapshot.h"
#include "server/accounts.h"
#include "server/batches.h"
#include "server/job_state.h"

namespace tide::server {

// Rank 0 of a gang listens for the others on a port in
// [kMasterPortBase, kMasterPortBase + kMasterPorts) of its node.
inline constexpr int kMasterPortBase = 29500;
inline constexpr int kMasterPorts = 1000;

// Everything one run of the scheduler needs, copied out of the state.
struct SchedulerInput {
  std::vector<sched::NodeView> nodes;
  std::vector<sched::PendingJob> queue;
  std::vector<sched::RunningJob> running;
  std::map<std::string, sched::AccountShare> shares;
  sched::SchedulerConfig config;
  int64_t now = 0;
};

// A node's reliability, 0..1, from its history: placements that ended
// there and those that ended because of it, with one good placement
// assumed so that a new node starts at 1.
double Reliability(const NodeHistory& h);

class PlanApplier {
 public:
  PlanApplier(Clock* clock, JobState* jobs, Accounts* accounts, Batches* batches)
      : clock_(clock), jobs_(jobs), accounts_(accounts), batches_(batches) {}

  // Weights from the settings and fair-share usage from the attempts that
  // ended, charged in time order. The jobs must be loaded first.
  void Recover(const store::Contents& contents);

  // --- what changed ---
  // Something besides new submissions changed: the next pass ranks all.
  void NeedFullPass() { full_needed_ = true; }
  // Something changed that frees nothing now (a queued job cancelled, an
  // ended one deleted): a full pass at the next tick is soon enough, so a
  // thousand cancels in a row cost a few passes, not a thousand.
  void NeedFullPassSoon() { full_soon_ = true; }
  // New queued jobs (a submission, or the trials of a batch).
  void Submitted(const std::vector<std::string>& ids);
  // Time alone changes levels, usage and starvation: every few seconds a
  // full pass runs even when nothing happens.
  void Tick();
  bool PassDue() const { return full_needed_ || !submitted_.empty(); }

  // Runs the pass that is due and applies its plan.
  void Pass();

  // The scheduler's input for the state now, with the whole queue (or, with
  // `only`, just those queued jobs).
  SchedulerInput Snapshot(int64_t now, const std::vector<std::string>* only = nullptr) const;
  // A queued job as the scheduler sees it.
  sched::PendingJob PendingOf(const JobEntry& e, int64_t now) const;

  // --- fair share ---
  sched::FairShare& fair() { return fair_; }
  const sched::FairShare& fair() const { return fair_; }
  void SetWeight(const std::string& user, double weight);
  double Weight(const std::string& user) const;

 private:
  void ApplyPreemptions(const sched::Plan& plan);
  void ApplyPlacements(const sched::Plan& plan);
  // Whether `alloc`s are still free on ready nodes for job `e`.
  bool StillValid(const JobEntry& e, const std::vector<sched::NodeAlloc>& allocs) const;
  // A free rendezvous port for a gang whose rank 0 runs on `node_id`.
  int MasterPort(const std::string& node_id, const std::string& job_id, int attempt) const;

  Clock* clock_;
  JobState* jobs_;
  Accounts* accounts_;
  Batches* batches_;
  sched::SchedulerConfig config_;
  sched::FairShare fair_;
  std::map<std::string, double> weights_;  // set by the admin
  bool full_needed_ = true;
  bool full_soon_ = false;
  // Set when an incremental pass left jobs waiting: the next tick refines
  // their reasons with a full pass.
  bool refine_reasons_ = false;
  std::vector<std::string> submitted_;  // since the last pass
  std::set<std::string> claimed_;  // nodes the last full pass held or reserved
  int waiting_after_pass_ = 0;
  int64_t last_full_pass_mono_ = 0;
};

}  // namespace tide::server
