#include "server/plan_applier.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <tuple>

#include "common/hash.h"
#include "scheduler/schedule.h"

namespace tide::server {

using api::Job;
using api::JobStatus;

namespace {

sched::Tier TierOf(const api::JobSpec& spec) {
  return spec.tier == "spot" ? sched::Tier::kSpot : sched::Tier::kOnDemand;
}

// GPU-seconds of the attempts a job has had: its attained service.
int64_t Attained(const Job& job, int64_t now) {
  double s = 0;
  for (const auto& a : job.attempts) s += api::AttemptGpuSeconds(a, now);
  return static_cast<int64_t>(s);
}

}  // namespace

double Reliability(const NodeHistory& h) {
  const int64_t good = std::max<int64_t>(0, h.ended - h.bad);
  return static_cast<double>(good + 1) / static_cast<double>(h.ended + 1);
}

// ------------------------------------------------------------------ recovery

void PlanApplier::Recover(const store::Contents& contents) {
  for (const auto& row : contents.settings) {
    if (row.key.rfind("weight:", 0) != 0) continue;
    double w = std::strtod(row.value.c_str(), nullptr);
    if (w > 0) SetWeight(row.key.substr(7), w);
  }
  std::vector<std::tuple<int64_t, std::string, double>> used;
  for (const auto& [id, e] : jobs_->jobs()) {
    for (const auto& a : e.job.attempts) {
      if (a.finished_at > 0) used.emplace_back(a.finished_at, e.job.owner, api::AttemptGpuSeconds(a, 0));
    }
  }
  std::sort(used.begin(), used.end());
  for (auto& [at, owner, gpu_s] : used) fair_.Charge(owner, gpu_s, at);
}

void PlanApplier::SetWeight(const std::string& user, double weight) {
  fair_.SetWeight(user, weight);
  weights_[user] = weight;
}

double PlanApplier::Weight(const std::string& user) const {
  auto it = weights_.find(user);
  return it == weights_.end() ? 1.0 : it->second;
}

// ------------------------------------------------------------------ what changed

void PlanApplier::Submitted(const std::vector<std::string>& ids) {
  submitted_.insert(submitted_.end(), ids.begin(), ids.end());
}

void PlanApplier::Tick() {
  // Waiting work is re-ranked now and then even when nothing happens:
  // service levels, fair-share usage and starvation change with time.
  const int64_t now_mono = clock_->MonotonicMs();
  if (full_soon_) {
    full_needed_ = true;
    full_soon_ = false;
  }
  if (refine_reasons_ || (!jobs_->queued().empty() && now_mono - last_full_pass_mono_ >= 5'000)) {
    full_needed_ = true;
    refine_reasons_ = false;
  }
}

// ------------------------------------------------------------------ the snapshot

sched::PendingJob PlanApplier::PendingOf(const JobEntry& e, int64_t now) const {
  sched::PendingJob p = PendingOfSpec(e.job.spec);
  p.id = e.job.id;
  p.account = e.job.owner;
  p.submitted_at = static_cast<int64_t>(e.order);
  p.queued_since = e.queued_since;
  p.attained_gpu_s = Attained(e.job, now);
  if (!e.job.attempts.empty() && e.job.attempts.back().started_at > 0) {
    p.last_run_ms = e.job.attempts.back().finished_at - e.job.attempts.back().started_at;
  }
  return p;
}

SchedulerInput PlanApplier::Snapshot(int64_t now, const std::vector<std::string>* only) const {
  SchedulerInput in;
  in.now = now;
  in.config = config_;
  in.shares = fair_.Shares(now);
  std::unordered_map<std::string, size_t> running_at;  // job -> index in in.running
  static const api::JobSpec kOnDemand;
  for (const auto& [id, n] : jobs_->nodes()) {
    sched::NodeView v;
    v.id = id;
    v.name = n.node.name;
    v.schedulable = n.node.state == api::NodeState::kReady;
    v.draining = n.node.draining;
    v.labels = n.node.labels;
    v.images = n.node.images;
    v.reliability = Reliability(n.history);
    v.cpus = v.cpus_free = n.node.cpus;
    v.memory_mb = v.memory_free_mb = n.node.memory_mb;
    for (const auto& g : n.node.gpus) {
      v.price = std::max(v.price, accounts_->Rate(n.node, g.index, kOnDemand));
    }
    std::set<int> used;
    for (const auto& [job_id, gpus] : n.leases) {
      used.insert(gpus.begin(), gpus.end());
      const api::Resources& r = jobs_->At(job_id).job.spec.resources;
      v.cpus_free -= r.cpus;
      v.memory_free_mb -= r.memory_mb;
    }
    for (const auto& g : n.node.gpus) {
      v.gpus.push_back({g.index, g.model, g.memory_mb, used.count(g.index) == 0});
    }
    in.nodes.push_back(std::move(v));
    for (const auto& [job_id, gpus] : n.leases) {
      auto [at, fresh] = running_at.try_emplace(job_id, in.running.size());
      if (!fresh) {  // another node of a gang
        in.running[at->second].allocs.push_back({id, gpus});
        continue;
      }
      const Job& job = jobs_->At(job_id).job;
      sched::RunningJob r;
      r.id = job_id;
      r.account = job.owner;
      r.tier = TierOf(job.spec);
      r.priority = job.spec.priority;
      r.allocs = {{id, gpus}};
      r.started_at = job.started_at;
      if (job.spec.max_runtime_s > 0) {  // a starting job's clock starts about now
        r.expected_end = (job.started_at > 0 ? job.started_at : now) + job.spec.max_runtime_s * 1000;
      }
      r.attained_gpu_s = Attained(job, now);
      // A job the server holds a checkpoint of resumes where it was: it may
      // yield its GPUs to a job at a lower service level.
      r.last_checkpoint = job.checkpoint_attempt > 0 ? job.checkpoint_at : 0;
      r.preemptible = r.last_checkpoint > 0;
      r.stopping = !StopReason(job).empty();
      in.running.push_back(std::move(r));
    }
  }
  std::vector<const JobEntry*> queued;
  if (only) {
    for (const auto& id : *only) {
      const JobEntry& e = jobs_->At(id);
      if (e.job.status == JobStatus::kQueued && !batches_->Held(id)) queued.push_back(&e);
    }
  } else {
    queued.reserve(jobs_->queued().size());
    for (const auto& [order, id] : jobs_->queued()) {
      if (!batches_->Held(id)) queued.push_back(&jobs_->At(id));
    }
  }
  in.queue.reserve(queued.size());
  for (const JobEntry* e : queued) in.queue.push_back(PendingOf(*e, now));
  return in;
}

// ------------------------------------------------------------------ a pass

// A full pass ranks the whole queue. After a batch of nothing but new
// submissions, a pass over just the new jobs is enough to place them: every
// older job still waits for nodes the last full pass claimed for it (held
// or reserved), and those count as full here, so no new job can take what
// an older one waits for. Reasons of new jobs that must wait are refined by
// the next full pass, at the next tick.
void PlanApplier::Pass() {
  bool full = full_needed_;
  full_needed_ = false;
  if (full) full_soon_ = false;
  std::vector<std::string> fresh = std::move(submitted_);
  submitted_.clear();
  if (jobs_->queued().empty()) {
    claimed_.clear();
    waiting_after_pass_ = 0;
    return;
  }
  batches_->Gate();
  const int64_t now = clock_->NowMs();
  SchedulerInput in;
  sched::Plan plan;
  while (true) {
    in = Snapshot(now, full ? nullptr : &fresh);
    if (!full) {
      for (auto& v : in.nodes) {
        if (!claimed_.count(v.id)) continue;
        for (auto& g : v.gpus) g.free = false;
      }
    }
    plan = sched::Schedule({in.nodes, in.queue, in.running, in.shares, in.config, now});
    // Stopping work cannot be undone: only a full pass, which sees what the
    // claimed nodes really have free, may decide it.
    if (!full && !plan.preemptions.empty()) {
      full = true;
      continue;
    }
    break;
  }
  if (full) {
    last_full_pass_mono_ = clock_->MonotonicMs();
    claimed_ = std::set<std::string>(plan.claimed.begin(), plan.claimed.end());
    waiting_after_pass_ = static_cast<int>(plan.pending.size());
  } else {
    claimed_.insert(plan.claimed.begin(), plan.claimed.end());
    if (!plan.pending.empty()) refine_reasons_ = true;
  }
  ApplyPreemptions(plan);
  ApplyPlacements(plan);
  // Pending reasons are derived state: kept in memory, recomputed on every
  // pass, never worth a write of their own.
  for (auto info : plan.pending) {
    JobEntry* e = jobs_->Find(in.queue[info.job].id);
    if (e == nullptr) continue;
    if (!full && info.position > 0) info.position += waiting_after_pass_;
    e->job.pending_reason = sched::PendingReason(plan, info);
    e->job.pending_reason_provisional = !full;
  }
  if (!full) waiting_after_pass_ += static_cast<int>(plan.pending.size());
}

// The victim gets the notice (SIGTERM, notice file, grace) and returns to
// the queue when its agent reports the exit.
void PlanApplier::ApplyPreemptions(const sched::Plan& plan) {
  for (const auto& pre : plan.preemptions) {
    JobEntry* e = jobs_->Find(pre.victim_id);
    if (e == nullptr || api::IsTerminal(e->job.status) || e->job.status == JobStatus::kQueued ||
        !StopReason(e->job).empty()) {
      continue;
    }
    spdlog::info("preempting {} (attempt {}) for {}", e->job.id, e->job.attempt, pre.for_job_id);
    jobs_->Preempt(*e);
    full_needed_ = true;
  }
}

bool PlanApplier::StillValid(const JobEntry& e, const std::vector<sched::NodeAlloc>& allocs) const {
  const api::Resources& res = e.job.spec.resources;
  if (static_cast<int>(allocs.size()) != res.nodes) return false;
  std::set<std::string> seen;
  for (const auto& alloc : allocs) {
    const NodeEntry* n = jobs_->FindNode(alloc.node_id);
    if (n == nullptr || n->node.state != api::NodeState::kReady || !seen.insert(alloc.node_id).second ||
        static_cast<int>(alloc.gpus.size()) != res.gpu_count) {
      return false;
    }
    std::set<int> used;
    for (const auto& [job, g] : n->leases) used.insert(g.begin(), g.end());
    for (int g : alloc.gpus) {
      if (used.count(g)) return false;
    }
  }
  return true;
}

// The plan was made from the state we hold the lock on, but each placement
// is re-checked anyway: a plan is only ever applied if it is still valid.
void PlanApplier::ApplyPlacements(const sched::Plan& plan) {
  for (const auto& p : plan.placements) {
    JobEntry* e = jobs_->Find(p.job_id);
    if (e == nullptr || e->job.status != JobStatus::kQueued) continue;
    if (!StillValid(*e, p.allocs)) {
      spdlog::warn("dropping stale placement of {}", p.job_id);
      full_needed_ = true;
      continue;
    }
    // The price is fixed when the attempt is placed.
    auto rate_on = [&](const sched::NodeAlloc& alloc) {
      return accounts_->Rate(jobs_->FindNode(alloc.node_id)->node, alloc.gpus.front(), e->job.spec);
    };
    // Never charged above what is held: a node dearer than any there was at
    // submission must be paid for in escrow first.
    ledger::Micros dearest = 0;
    for (const auto& alloc : p.allocs) dearest = std::max(dearest, rate_on(alloc));
    if (Status held = accounts_->EnsureHeld(*e, dearest, jobs_->FindNode(p.allocs[0].node_id)->node.name);
        !held.ok()) {
      e->job.pending_reason = held.message();
      e->job.pending_reason_provisional = false;
      continue;
    }
    api::Attempt a;
    a.attempt = e->job.attempt;
    a.node_id = p.allocs[0].node_id;
    a.gpus = p.allocs[0].gpus;
    a.rate = rate_on(p.allocs[0]);
    if (e->job.spec.resources.nodes > 1) {
      for (const auto& alloc : p.allocs) {
        api::Rank r;
        r.node_id = alloc.node_id;
        r.gpus = alloc.gpus;
        r.rate = rate_on(alloc);
        a.ranks.push_back(std::move(r));
      }
      const api::Node& master = jobs_->FindNode(a.node_id)->node;
      a.master_addr = !master.address.empty() ? master.address : master.hostname;
      a.master_port = MasterPort(a.node_id, e->job.id, e->job.attempt);
    }
    jobs_->Place(*e, std::move(a));
  }
}

// Rank 0 of a gang listens on a port of its node for the other ranks: one
// from kMasterPortBase on, spread by job id, not used by another gang whose
// rank 0 is on the same node.
int PlanApplier::MasterPort(const std::string& node_id, const std::string& job_id,
                            int attempt) const {
  std::set<int> used;
  for (const auto& [other, gpus] : jobs_->FindNode(node_id)->leases) {
    const api::Attempt* a = CurrentAttempt(jobs_->At(other).job);
    if (a != nullptr && !a->ranks.empty() && a->node_id == node_id) used.insert(a->master_port);
  }
  int offset = static_cast<int>(Fnv1a(0, job_id + "#" + std::to_string(attempt)) % kMasterPorts);
  for (int i = 0; i < kMasterPorts; ++i) {
    int port = kMasterPortBase + (offset + i) % kMasterPorts;
    if (!used.count(port)) return port;
  }
  return kMasterPortBase + offset;  // more gangs than ports on one node: cannot happen (GPUs)
}

}  // namespace tide::server
