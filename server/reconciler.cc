#include "server/reconciler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <vector>

namespace tide::server {

using api::Job;
using api::JobStatus;

namespace {
Status NotLeased(const std::string& job_id, int attempt) {
  return Status::Conflict("job " + job_id + " attempt " + std::to_string(attempt) +
                          " is not leased to this node");
}
}  // namespace

bool Reconciler::Leased(const std::string& node_id, const JobEntry& e, int attempt) const {
  const NodeEntry* n = jobs_->FindNode(node_id);
  return n != nullptr && n->leases.count(e.job.id) && RankOn(e.job, node_id) >= 0 &&
         e.job.attempt == attempt;
}

void Reconciler::Register(NodeEntry& n, const api::RegisterRequest& req) {
  const int64_t now = clock_->NowMs();
  if (n.node.registered_at == 0) n.node.registered_at = now;
  n.node.name = req.name;
  n.node.hostname = req.hostname;
  n.node.address = req.address;
  n.node.prices = req.prices;
  n.node.gpus = req.gpus;
  n.node.labels = req.labels;
  n.node.images = req.images;
  n.node.runtime = req.runtime;
  n.node.cpus = req.cpus;
  n.node.memory_mb = req.memory_mb;
  for (auto& g : n.node.gpus) {
    if (g.model.empty()) g.model = api::CanonicalGpuModel(g.name);
  }
  n.node.state = api::NodeState::kReady;
  n.node.last_heartbeat = now;
  n.last_seen_mono = clock_->MonotonicMs();
  jobs_->TouchNode(n);
  spdlog::info("node {} ({}) registered with {} GPUs", req.name, n.node.id, req.gpus.size());
}

Status Reconciler::Heartbeat(const std::string& node_id, const api::Heartbeat& hb,
                             api::AgentWork& work) {
  NodeEntry* n = jobs_->FindNode(node_id);
  if (n == nullptr) return Status::NotFound("node " + node_id + " is unknown");
  const int64_t now_mono = clock_->MonotonicMs();
  const int64_t now = clock_->NowMs();
  n->last_seen_mono = now_mono;
  n->node.last_heartbeat = now;
  for (const auto& t : hb.gpus) {
    for (auto& g : n->node.gpus) {
      if (g.index != t.index) continue;
      g.utilization_pct = t.utilization_pct;
      g.memory_used_mb = t.memory_used_mb;
      g.temperature_c = t.temperature_c;
    }
  }
  if (!hb.gpus.empty()) telemetry_->RecordNode(node_id, n->node.gpus, now);
  if (n->node.state == api::NodeState::kLost) {
    spdlog::info("node {} ({}) is back", n->node.name, node_id);
    n->node.state = api::NodeState::kReady;
    jobs_->TouchNode(*n);
  }
  // Reconcile what the agent runs with what we leased to it.
  std::set<std::string> reported;
  for (const auto& r : hb.running) {
    reported.insert(r.job_id);
    const JobEntry* e = jobs_->Find(r.job_id);
    // A lease on this node: the job, or one rank of a gang, runs here.
    bool ours = e != nullptr && e->job.attempt == r.attempt && n->leases.count(r.job_id);
    if (!ours) {
      work.cancels.push_back({r.job_id, r.attempt, "not_leased", 0});
    } else if (std::string why = StopReason(e->job); !why.empty()) {
      work.cancels.push_back({r.job_id, r.attempt, why, e->job.spec.grace_s});
    }
    if (ours && !hb.gpus.empty() && e->job.status == JobStatus::kRunning) {
      telemetry_->RecordJob(r.job_id, r.attempt, std::max(RankOn(e->job, node_id), 0), node_id,
                            n->leases.at(r.job_id), n->node.gpus, now);
    }
  }
  std::vector<std::string> lost;
  for (const auto& [job_id, gpus] : n->leases) {
    if (reported.count(job_id)) continue;
    const JobEntry& e = jobs_->At(job_id);
    if (now_mono - e.status_since_mono < options_.report_grace_ms) continue;
    const api::Attempt* a = CurrentAttempt(e.job);
    int rank = RankOn(e.job, node_id);
    bool started_here = e.job.status == JobStatus::kRunning ||
                        (a != nullptr && rank >= 0 && !a->ranks.empty() &&
                         a->ranks[static_cast<size_t>(rank)].started_at > 0);
    if (started_here || !StopReason(e.job).empty()) {
      lost.push_back(job_id);  // a cancelled one ends as cancelled
    } else {
      // Starting but never taken up: offer it again.
      delivery_->OfferAgain(job_id, e.job.attempt, node_id);
    }
  }
  for (const auto& job_id : lost) {
    JobEntry& e = jobs_->At(job_id);
    spdlog::warn("node {} no longer runs {} (attempt {}); requeueing", node_id, job_id,
                 e.job.attempt);
    jobs_->LosePart(e, node_id, "lost_by_agent");
  }
  return Status::Ok();
}

void Reconciler::LoseSilentNodes() {
  const int64_t now_mono = clock_->MonotonicMs();
  for (auto& [id, n] : jobs_->nodes()) {
    if (n.node.state != api::NodeState::kReady) continue;
    if (now_mono - n.last_seen_mono < options_.node_timeout_ms) continue;
    spdlog::warn("node {} ({}) lost: no heartbeat for {} ms; requeueing {} jobs", n.node.name, id,
                 now_mono - n.last_seen_mono, n.leases.size());
    Lose(n, "node_lost");
  }
}

void Reconciler::Lose(NodeEntry& n, const std::string& reason) {
  n.node.state = api::NodeState::kLost;
  jobs_->TouchNode(n);
  std::vector<std::string> leased;
  for (const auto& [job_id, gpus] : n.leases) leased.push_back(job_id);
  for (const auto& job_id : leased) {
    if (JobEntry* e = jobs_->Find(job_id)) jobs_->LosePart(*e, n.node.id, reason);
  }
}

Status Reconciler::JobEvent(const std::string& node_id, const std::string& job_id,
                            const api::JobEvent& ev) {
  JobEntry* e = jobs_->Find(job_id);
  if (e == nullptr) return Status::NotFound("no job " + job_id);
  // An event for an attempt we already ended (node was lost, job
  // requeued): the agent must stop it, and nothing changes here.
  if (!Leased(node_id, *e, ev.attempt)) return NotLeased(job_id, ev.attempt);
  const int rank = RankOn(e->job, node_id);
  const api::Attempt* current = CurrentAttempt(e->job);
  const bool gang = current != nullptr && !current->ranks.empty();
  if (ev.state == "running") {
    jobs_->Started(*e, rank);
    return Status::Ok();
  }
  if (!gang) {
    jobs_->Finish(*e, ev);
    return Status::Ok();
  }
  if (auto outcome = jobs_->RankExited(*e, rank, ev)) jobs_->Finish(*e, *outcome);
  return Status::Ok();
}

Status Reconciler::Checkpoint(const std::string& node_id, const std::string& job_id, int attempt,
                              int64_t bytes, const std::function<Status()>& commit) {
  JobEntry* e = jobs_->Find(job_id);
  if (e == nullptr) return Status::NotFound("no job " + job_id);
  if (e->job.attempt != attempt || RankOn(e->job, node_id) < 0) return NotLeased(job_id, attempt);
  if (commit) {
    TIDE_RETURN_IF_ERROR(commit());
  }
  jobs_->Checkpointed(*e, attempt, bytes);
  return Status::Ok();
}

Result<int> Reconciler::AgentRank(const std::string& node_id, const std::string& job_id,
                                  int attempt, bool current_only) const {
  const JobEntry* e = jobs_->Find(job_id);
  if (e == nullptr) return Status::NotFound("no job " + job_id);
  const Job& job = e->job;
  if (current_only) {
    if (!Leased(node_id, *e, attempt)) {
      bool ever = false;
      for (const auto& a : job.attempts) ever = ever || RankIn(job, a.attempt, node_id) >= 0;
      if (!ever) return Status::NotFound("job " + job_id + " is not assigned to this node");
      return NotLeased(job_id, attempt);
    }
    return RankOn(job, node_id);
  }
  if (attempt > 0) {
    int rank = RankIn(job, attempt, node_id);
    if (rank < 0) {
      return Status::NotFound("job " + job_id + " attempt " + std::to_string(attempt) +
                              " is not assigned to this node");
    }
    return rank;
  }
  int rank = RankOn(job, node_id);
  if (rank < 0) return Status::NotFound("job " + job_id + " is not assigned to this node");
  return rank;
}

Result<api::Node> Reconciler::Drain(const std::string& id_or_name, bool draining, bool evict) {
  for (auto& [id, n] : jobs_->nodes()) {
    if (id != id_or_name && n.node.name != id_or_name) continue;
    if (n.node.draining != draining) {
      n.node.draining = draining;
      jobs_->TouchNode(n);
      spdlog::info("node {} ({}) {}", n.node.name, id, draining ? "draining" : "open again");
    }
    if (draining && evict) {
      // Its jobs get the notice (reason node_draining) and, once stopped,
      // return to the queue to resume elsewhere: no retry is used up.
      std::vector<std::string> leased;
      for (const auto& [job_id, gpus] : n.leases) leased.push_back(job_id);
      for (const std::string& job_id : leased) {
        JobEntry& e = jobs_->At(job_id);
        if (StopReason(e.job).empty()) jobs_->Evict(e, "node_draining");
      }
    }
    return n.node;
  }
  return Status::NotFound("no node " + id_or_name);
}

Result<api::Node> Reconciler::Revoke(const std::string& id_or_name) {
  for (auto& [id, n] : jobs_->nodes()) {
    if (id != id_or_name && n.node.name != id_or_name) continue;
    spdlog::warn("node {} ({}) revoked: requeueing {} jobs", n.node.name, id, n.leases.size());
    Lose(n, "node_revoked");
    return n.node;
  }
  return Status::NotFound("no node " + id_or_name);
}

}  // namespace tide::server
