#include "server/job_state.h"

#include <spdlog/spdlog.h>

#include "server/records.h"

namespace tide::server {

using api::Job;
using api::JobStatus;
using nlohmann::json;

// ------------------------------------------------------------------ views

const api::Attempt* CurrentAttempt(const Job& job) {
  if (job.attempts.empty()) return nullptr;
  const api::Attempt& a = job.attempts.back();
  return a.attempt == job.attempt && a.finished_at == 0 ? &a : nullptr;
}

std::vector<std::pair<std::string, std::vector<int>>> Allocs(const Job& job, bool live) {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  const api::Attempt* a = CurrentAttempt(job);
  if (a != nullptr && !a->ranks.empty()) {
    for (const auto& r : a->ranks) {
      if (!live || r.finished_at == 0) out.emplace_back(r.node_id, r.gpus);
    }
  } else if (!job.node_id.empty()) {
    out.emplace_back(job.node_id, job.gpus);
  }
  return out;
}

int RankOn(const Job& job, const std::string& node_id) {
  const api::Attempt* a = CurrentAttempt(job);
  if (a != nullptr && !a->ranks.empty()) {
    for (size_t i = 0; i < a->ranks.size(); ++i) {
      if (a->ranks[i].node_id == node_id) return static_cast<int>(i);
    }
    return -1;
  }
  return job.node_id == node_id && !node_id.empty() ? 0 : -1;
}

int RankIn(const Job& job, int attempt, const std::string& node_id) {
  for (const auto& a : job.attempts) {
    if (a.attempt != attempt) continue;
    if (a.ranks.empty()) return a.node_id == node_id ? 0 : -1;
    for (size_t i = 0; i < a.ranks.size(); ++i) {
      if (a.ranks[i].node_id == node_id) return static_cast<int>(i);
    }
  }
  return -1;
}

sched::PendingJob PendingOfSpec(const api::JobSpec& spec) {
  const api::Resources& r = spec.resources;
  sched::PendingJob p;
  p.tier = spec.tier == "spot" ? sched::Tier::kSpot : sched::Tier::kOnDemand;
  p.priority = spec.priority;
  p.nodes = r.nodes;
  p.gpu_count = r.gpu_count;
  p.gpu_types = r.gpu_types;
  p.gpu_memory_mb = r.gpu_memory_mb;
  p.cpus = r.cpus;
  p.memory_mb = r.memory_mb;
  p.constraints = spec.constraints;
  p.image = spec.image;
  p.max_price = spec.max_price;
  p.max_runtime_ms = spec.max_runtime_s * 1000;
  return p;
}

std::string StopReason(const Job& job) {
  if (job.cancel_requested) return job.cancel_reason;
  if (job.preempt_requested) return "preempted";
  if (!job.gang_failure.empty()) return "gang_failed";
  if (!job.requeue_reason.empty()) return job.requeue_reason;
  return "";
}

bool IsOwnFailure(const std::string& reason) {
  return reason.rfind("exit_code:", 0) == 0 || reason.rfind("signal:", 0) == 0 || reason == "oom";
}

bool IsNodeFault(const std::string& reason) {
  return reason == "node_lost" || reason == "node_revoked" || reason == "lost_by_agent" ||
         reason == "start_failed";
}

// ------------------------------------------------------------------ loading

Status JobState::Load(const store::Contents& contents) {
  const int64_t now_mono = clock_->MonotonicMs();
  for (const auto& row : contents.nodes) {
    auto record = NodeRecordFromDoc(row.doc);
    if (!record.ok()) return record.status().WithContext("node " + row.id);
    NodeEntry& n = nodes_[row.id];
    n.node = std::move(record->node);
    n.history = record->history;
    // Give every node a full timeout to heartbeat again after our restart.
    n.last_seen_mono = now_mono;
  }
  for (const auto& row : contents.jobs) {
    auto job = JobRecordFromDoc(row.doc);
    if (!job.ok()) return job.status().WithContext("job " + row.id);
    JobEntry& e = jobs_[row.id];
    e.job = std::move(job).value();
    e.order = next_order_++;
    e.status_since_mono = now_mono;
    // Back in the queue since its last attempt ended, or since it was submitted.
    e.queued_since = e.job.created_at;
    if (!e.job.attempts.empty()) {
      e.queued_since = std::max(e.queued_since, e.job.attempts.back().finished_at);
    }
    order_.push_back(row.id);
    if (e.job.status == JobStatus::kQueued) queued_[e.order] = e.job.id;
    if (e.job.status == JobStatus::kStarting || e.job.status == JobStatus::kRunning) {
      for (auto& [node, gpus] : Allocs(e.job, /*live=*/true)) {
        auto n = nodes_.find(node);
        if (n != nodes_.end()) n->second.leases[e.job.id] = gpus;
      }
    }
  }
  // Secrets of jobs still to run; a row an ended job left (its deletion
  // was not yet written) goes with the next write.
  for (const auto& row : contents.secrets) {
    JobEntry* e = Find(row.job_id);
    if (e == nullptr || api::IsTerminal(e->job.status)) {
      forget_secrets_.push_back(row.job_id);
      continue;
    }
    json doc = json::parse(row.doc, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) return Status::Internal("secrets of job " + row.job_id + ": not a JSON object");
    for (auto& [name, value] : doc.items()) {
      if (!value.is_string()) {
        return Status::Internal("secrets of job " + row.job_id + ": " + name + " is not a string");
      }
      e->job.spec.secrets[name] = value.get<std::string>();
    }
  }
  return Status::Ok();
}

void JobState::Repair() {
  for (const std::string& id : order_) {
    JobEntry& e = jobs_.at(id);
    if (e.job.status != JobStatus::kStarting && e.job.status != JobStatus::kRunning) continue;
    auto allocs = Allocs(e.job, /*live=*/false);
    bool known = !allocs.empty();
    for (auto& [node, gpus] : allocs) known = known && nodes_.count(node) > 0;
    if (known) continue;
    spdlog::warn("job {} attempt {} is leased on a node the store does not hold; requeueing",
                 id, e.job.attempt);
    Requeue(e, "node_lost");
  }
}

// ------------------------------------------------------------------ tables

JobEntry* JobState::Find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

const JobEntry* JobState::Find(const std::string& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

NodeEntry* JobState::FindNode(const std::string& id) {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

const NodeEntry* JobState::FindNode(const std::string& id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

namespace {
bool HasSecretValues(const api::JobSpec& spec) {
  for (const auto& [name, value] : spec.secrets) {
    if (!value.empty()) return true;
  }
  return false;
}
}  // namespace

JobState::Flushed JobState::Flush(store::WriteBatch& batch, std::vector<std::string>* added) {
  Flushed out;
  for (std::string& id : forget_secrets_) batch.delete_secrets.push_back(std::move(id));
  forget_secrets_.clear();
  for (const std::string& id : dirty_jobs_) {
    Job& job = jobs_.at(id).job;
    batch.jobs.push_back(
        {job.id, job.owner, api::JobStatusName(job.status), job.created_at, JobRecordDoc(job)});
    if (added_.count(id) && HasSecretValues(job.spec)) {
      batch.secrets.push_back({job.id, json(job.spec.secrets).dump()});
    }
    if (api::IsTerminal(job.status) && HasSecretValues(job.spec)) {
      batch.delete_secrets.push_back(job.id);
      for (auto& [name, value] : job.spec.secrets) value.clear();
    }
    if (added_.count(id)) {
      ++out.added;
      if (added) added->push_back(id);
    } else {
      ++out.changed;
    }
    uint64_t& seq = change_of_[id];
    if (seq != 0) changes_.erase(seq);
    seq = ++change_seq_;
    changes_[seq] = id;
  }
  for (const std::string& id : dirty_nodes_) {
    const NodeEntry& n = nodes_.at(id);
    batch.nodes.push_back({n.node.id, n.node.name, NodeRecordDoc(n.node, n.history)});
    ++out.changed;
  }
  dirty_jobs_.clear();
  dirty_nodes_.clear();
  added_.clear();
  return out;
}

std::vector<std::string> JobState::ChangedSince(uint64_t seq, size_t max, uint64_t* last) const {
  std::vector<std::string> out;
  *last = seq;
  for (auto it = changes_.upper_bound(seq); it != changes_.end() && out.size() < max; ++it) {
    out.push_back(it->second);
    *last = it->first;
  }
  return out;
}

// ------------------------------------------------------------------ transitions

void JobState::Delete(JobEntry& e, int64_t now) {
  Job& job = e.job;
  job.deleted_at = now;
  job.spec = api::DeletedSpec(job.spec);
  job.params.clear();
  job.checkpoint_attempt = 0;
  job.checkpoint_bytes = 0;
  job.checkpoint_at = 0;
  Touch(e);
}

JobEntry& JobState::Add(Job job) {
  JobEntry& e = jobs_[job.id];
  e.job = std::move(job);
  e.order = next_order_++;
  e.status_since_mono = clock_->MonotonicMs();
  e.queued_since = e.job.created_at;
  order_.push_back(e.job.id);
  queued_[e.order] = e.job.id;
  added_.insert(e.job.id);
  Touch(e);
  if (listener_) listener_->StatusChanged(e, e.job.status);
  return e;
}

void JobState::SetStatus(JobEntry& e, JobStatus s) {
  const JobStatus from = e.job.status;
  if (s == JobStatus::kQueued) {
    queued_[e.order] = e.job.id;
  } else {
    queued_.erase(e.order);
  }
  e.job.status = s;
  e.status_since_mono = clock_->MonotonicMs();
  Touch(e);
  if (listener_) listener_->StatusChanged(e, from);
}

void JobState::Place(JobEntry& e, api::Attempt a) {
  if (a.ranks.empty()) {
    nodes_[a.node_id].leases[e.job.id] = a.gpus;
  } else {
    for (const api::Rank& r : a.ranks) nodes_[r.node_id].leases[e.job.id] = r.gpus;
  }
  delivery_->HoldBack(e.job.id);
  e.job.node_id = a.node_id;
  e.job.gpus = a.gpus;
  e.job.pending_reason.clear();
  e.job.attempts.push_back(std::move(a));
  SetStatus(e, JobStatus::kStarting);
}

void JobState::Started(JobEntry& e, int rank) {
  const int64_t now = clock_->NowMs();
  api::Attempt* a = e.job.attempts.empty() ? nullptr : &e.job.attempts.back();
  if (a == nullptr || a->ranks.empty()) {
    if (e.job.status != JobStatus::kStarting) return;
    e.job.started_at = now;
    if (a != nullptr) a->started_at = now;
    SetStatus(e, JobStatus::kRunning);
    return;
  }
  api::Rank& r = a->ranks[static_cast<size_t>(rank)];
  if (r.started_at != 0) return;
  r.started_at = now;
  if (a->started_at == 0) a->started_at = now;
  Touch(e);
  bool all = true;
  for (const auto& other : a->ranks) all = all && other.started_at > 0;
  if (all && e.job.status == JobStatus::kStarting) {
    e.job.started_at = now;
    SetStatus(e, JobStatus::kRunning);
  }
}

void JobState::NoteNodeOutcome(const std::string& node_id, const std::string& reason) {
  NodeEntry* n = FindNode(node_id);
  if (n == nullptr) return;
  n->history.ended += 1;
  if (IsNodeFault(reason)) n->history.bad += 1;
  TouchNode(*n);
}

void JobState::EndAttempt(JobEntry& e, const std::string& reason, std::optional<int> exit_code) {
  const int64_t now = clock_->NowMs();
  auto allocs = Allocs(e.job, /*live=*/false);
  if (listener_) listener_->AttemptEnding(e, now);  // its last seconds
  if (!e.job.attempts.empty() && e.job.attempts.back().attempt == e.job.attempt &&
      e.job.attempts.back().finished_at == 0) {
    api::Attempt& a = e.job.attempts.back();
    if (a.ranks.empty()) NoteNodeOutcome(a.node_id, reason);
    for (auto& r : a.ranks) {
      if (r.finished_at > 0) continue;
      r.finished_at = now;
      r.reason = reason;
      NoteNodeOutcome(r.node_id, reason);
    }
    a.finished_at = now;
    a.reason = reason;
    a.exit_code = exit_code;
    if (listener_) listener_->AttemptEnded(e, a, now);
  }
  for (auto& [node_id, gpus] : allocs) {
    if (NodeEntry* n = FindNode(node_id)) n->leases.erase(e.job.id);
    delivery_->Forget(e.job.id, e.job.attempt, node_id);
  }
  delivery_->Unhold(e.job.id);
  Touch(e);
}

void JobState::Requeue(JobEntry& e, const std::string& reason, std::optional<int> exit_code) {
  EndAttempt(e, reason, exit_code);
  if (e.job.cancel_requested) {
    e.job.reason = e.job.cancel_reason;
    e.job.finished_at = clock_->NowMs();
    SetStatus(e, JobStatus::kCancelled);
    return;
  }
  e.job.reason = reason;
  e.job.preempt_requested = false;
  e.job.gang_failure.clear();
  e.job.requeue_reason.clear();
  e.queued_since = clock_->NowMs();
  e.job.attempt += 1;
  e.job.node_id.clear();
  e.job.gpus.clear();
  e.job.started_at = 0;
  e.job.exit_code.reset();
  SetStatus(e, JobStatus::kQueued);
}

void JobState::Finish(JobEntry& e, const api::JobEvent& ev) {
  const int64_t now = clock_->NowMs();
  Job& job = e.job;
  if (!job.requeue_reason.empty() && job.gang_failure.empty() && !job.cancel_requested &&
      ev.reason == job.requeue_reason) {
    // A node of the gang went away, or the node is drained: every rank
    // has stopped, so it runs again.
    Requeue(e, job.requeue_reason);
    return;
  }
  if (ev.reason == "agent_shutdown" && !job.cancel_requested) {
    // The agent was stopped, not the job: it runs again elsewhere.
    Requeue(e, "agent_shutdown");
    return;
  }
  if (job.preempt_requested && !job.cancel_requested && ev.reason == "preempted") {
    // Stopped for higher-ranked work: back to the queue, same id, next
    // attempt. Whatever the exit, it does not count as a failure.
    Requeue(e, "preempted");
    return;
  }
  std::string reason;
  JobStatus final_status;
  if (job.cancel_requested && job.cancel_reason == "budget_exceeded") {
    final_status = JobStatus::kFailed;  // stopped by its own cost cap
    reason = job.cancel_reason;
  } else if (job.cancel_requested) {
    final_status = JobStatus::kCancelled;
    reason = job.cancel_reason;
  } else if (!ev.reason.empty()) {
    final_status = JobStatus::kFailed;  // timeout, oom, start_failed, ...
    reason = ev.reason;
  } else if (ev.exit_code && *ev.exit_code == 0) {
    final_status = JobStatus::kCompleted;
  } else {
    final_status = JobStatus::kFailed;
    reason = "exit_code:" + std::to_string(ev.exit_code.value_or(-1));
  }
  if (final_status == JobStatus::kFailed && !job.cancel_requested &&
      job.retries < job.spec.retry_times && IsOwnFailure(reason)) {
    // The job's own failure, and its retry policy allows another attempt.
    job.retries += 1;
    spdlog::info("job {} attempt {} failed ({}): retry {} of {}", job.id, job.attempt, reason,
                 job.retries, job.spec.retry_times);
    Requeue(e, reason, ev.exit_code);
    return;
  }
  EndAttempt(e, reason.empty() ? "completed" : reason, ev.exit_code);
  job.reason = reason;
  job.exit_code = ev.exit_code;
  job.finished_at = now;
  if (job.started_at == 0) job.started_at = now;
  SetStatus(e, final_status);
}

void JobState::Cancel(JobEntry& e, const std::string& reason) {
  if (e.job.status == JobStatus::kStarting && !Delivered(e.job)) {
    // No agent has it yet: end it here and free its GPUs.
    e.job.cancel_requested = true;
    e.job.cancel_reason = reason;
    Requeue(e, reason);
  } else if (e.job.status == JobStatus::kQueued) {
    e.job.reason = reason;
    e.job.pending_reason.clear();
    e.job.finished_at = clock_->NowMs();
    SetStatus(e, JobStatus::kCancelled);
  } else {
    e.job.cancel_requested = true;
    e.job.cancel_reason = reason;
    Touch(e);
    DropUndeliveredRanks(e);
    FinishGangIfDone(e);
  }
}

void JobState::Preempt(JobEntry& e) {
  if (e.job.status == JobStatus::kStarting && !Delivered(e.job)) {
    Requeue(e, "preempted");  // no agent has it yet
    return;
  }
  e.job.preempt_requested = true;
  Touch(e);
  DropUndeliveredRanks(e);
  FinishGangIfDone(e);
}

void JobState::Evict(JobEntry& e, const std::string& reason) {
  if (!Delivered(e.job)) {
    Requeue(e, reason);
    return;
  }
  e.job.requeue_reason = reason;
  Touch(e);
  DropUndeliveredRanks(e);
  FinishGangIfDone(e);
}

void JobState::Checkpointed(JobEntry& e, int attempt, int64_t bytes) {
  e.job.checkpoint_attempt = attempt;
  e.job.checkpoint_bytes = bytes;
  e.job.checkpoint_at = clock_->NowMs();
  Touch(e);
}

bool JobState::Delivered(const Job& job) const {
  // What runs was delivered, even if the record of it went with a restart.
  if (job.status == JobStatus::kRunning) return true;
  if (const api::Attempt* a = CurrentAttempt(job)) {
    for (const auto& r : a->ranks) {
      if (r.started_at > 0) return true;
    }
  }
  for (auto& [node_id, gpus] : Allocs(job, /*live=*/false)) {
    if (delivery_->Handed(job.id, job.attempt, node_id)) return true;
  }
  return false;
}

// ------------------------------------------------------------------ gangs

void JobState::FreeRank(JobEntry& e, api::Rank& r) {
  if (r.started_at == 0) r.started_at = r.finished_at;
  if (NodeEntry* n = FindNode(r.node_id)) n->leases.erase(e.job.id);
  delivery_->Forget(e.job.id, e.job.attempt, r.node_id);
  NoteNodeOutcome(r.node_id, r.reason);
  Touch(e);
}

std::optional<api::JobEvent> JobState::RankExited(JobEntry& e, int rank, const api::JobEvent& ev) {
  api::Attempt& a = e.job.attempts.back();
  api::Rank& r = a.ranks[static_cast<size_t>(rank)];
  if (ev.reason == "agent_shutdown" && !e.job.cancel_requested) {
    // That node's part must run again, so the whole gang does.
    LosePart(e, r.node_id, "agent_shutdown");
    return std::nullopt;
  }
  r.finished_at = clock_->NowMs();
  r.reason = ev.reason;
  r.exit_code = ev.exit_code;
  FreeRank(e, r);
  bool failed = !ev.reason.empty() || !ev.exit_code || *ev.exit_code != 0;
  if (failed && StopReason(e.job).empty()) {
    e.job.gang_failure = !ev.reason.empty()
                             ? ev.reason
                             : "exit_code:" + std::to_string(ev.exit_code.value_or(-1));
    spdlog::info("job {} attempt {}: rank {} failed ({}); stopping the other ranks", e.job.id,
                 e.job.attempt, rank, e.job.gang_failure);
    DropUndeliveredRanks(e);
  }
  return GangOutcome(e);
}

void JobState::LosePart(JobEntry& e, const std::string& node_id, const std::string& reason) {
  const api::Attempt* current = CurrentAttempt(e.job);
  if (current == nullptr || current->ranks.empty()) {
    Requeue(e, reason);
    return;
  }
  api::Attempt& a = e.job.attempts.back();
  int rank = RankOn(e.job, node_id);
  if (rank >= 0 && a.ranks[static_cast<size_t>(rank)].finished_at == 0) {
    api::Rank& r = a.ranks[static_cast<size_t>(rank)];
    r.finished_at = clock_->NowMs();
    r.reason = reason;
    FreeRank(e, r);
  }
  if (StopReason(e.job).empty()) {
    e.job.requeue_reason = reason;
    spdlog::info("job {} attempt {}: rank {} {}; stopping the other ranks to run it again",
                 e.job.id, e.job.attempt, rank, reason);
  }
  Touch(e);
  DropUndeliveredRanks(e);
  FinishGangIfDone(e);
}

// Ranks no agent has been handed yet cannot get the notice: when the gang
// is being stopped they end here, at once.
void JobState::DropUndeliveredRanks(JobEntry& e) {
  const api::Attempt* current = CurrentAttempt(e.job);
  if (current == nullptr || current->ranks.empty()) return;
  api::Attempt& a = e.job.attempts.back();
  const std::string why = StopReason(e.job);
  const int64_t now = clock_->NowMs();
  for (auto& r : a.ranks) {
    if (r.finished_at > 0 || r.started_at > 0 ||
        delivery_->Handed(e.job.id, e.job.attempt, r.node_id)) {
      continue;
    }
    r.finished_at = now;
    r.reason = why;
    FreeRank(e, r);
  }
}

std::optional<api::JobEvent> JobState::GangOutcome(const JobEntry& e) const {
  const api::Attempt* current = CurrentAttempt(e.job);
  if (current == nullptr || current->ranks.empty()) return std::nullopt;
  const api::Attempt& a = *current;
  for (const auto& other : a.ranks) {
    if (other.finished_at == 0) return std::nullopt;
  }
  api::JobEvent out;
  out.attempt = a.attempt;
  out.state = "exited";
  out.exit_code = 0;
  bool preempted = false;
  for (const auto& other : a.ranks) preempted = preempted || other.reason == "preempted";
  if (preempted) {
    out.reason = "preempted";
  } else if (!e.job.requeue_reason.empty() && e.job.gang_failure.empty()) {
    out.reason = e.job.requeue_reason;
  } else if (!e.job.gang_failure.empty()) {
    // The rank that failed first, not the ones stopped because of it.
    static const std::set<std::string> kNotFailures = {
        "gang_failed", "agent_shutdown", "node_lost", "lost_by_agent", "preempted", "cancelled"};
    const api::Rank* first = nullptr;
    for (const auto& other : a.ranks) {
      bool bad = !other.reason.empty() || !other.exit_code || *other.exit_code != 0;
      if (!bad || kNotFailures.count(other.reason)) continue;
      if (first == nullptr || other.finished_at < first->finished_at) first = &other;
    }
    out.reason = e.job.gang_failure;
    if (first != nullptr) {
      out.reason = first->reason;
      out.exit_code = first->exit_code;
    }
  }
  return out;
}

void JobState::FinishGangIfDone(JobEntry& e) {
  if (auto outcome = GangOutcome(e)) Finish(e, *outcome);
}

}  // namespace tide::server
