#include "server/delivery.h"

#include "server/job_state.h"

namespace tide::server {

void Delivery::Collect(const JobState& jobs, const NodeEntry& node, api::AgentWork& work) {
  MutexLock lock(mu_);
  for (const auto& [job_id, gpus] : node.leases) {
    const api::Job& job = jobs.At(job_id).job;
    const std::string key = Key(job_id, job.attempt, node.node.id);
    if (std::string why = StopReason(job); !why.empty()) {
      if (stops_.insert(key).second) work.cancels.push_back({job_id, job.attempt, why, job.spec.grace_s});
      continue;
    }
    if (job.status != api::JobStatus::kStarting || assigned_.count(key) || uncommitted_.count(job_id)) {
      continue;
    }
    assigned_.insert(key);
    api::Assignment as{job, {}};
    // The agent sees its own part: its node, its GPUs, its rank.
    as.job.node_id = node.node.id;
    as.job.gpus = gpus;
    const api::Attempt* a = CurrentAttempt(job);
    if (a != nullptr && !a->ranks.empty()) {
      as.gang.rank = RankOn(job, node.node.id);
      as.gang.nnodes = static_cast<int>(a->ranks.size());
      as.gang.master_addr = a->master_addr;
      as.gang.master_port = a->master_port;
    }
    work.assignments.push_back(std::move(as));
  }
}

std::string Delivery::Key(const std::string& job_id, int attempt, const std::string& node_id) {
  return job_id + "#" + std::to_string(attempt) + "@" + node_id;
}

bool Delivery::Handed(const std::string& job_id, int attempt, const std::string& node_id) const {
  MutexLock lock(mu_);
  return assigned_.count(Key(job_id, attempt, node_id)) > 0;
}

bool Delivery::Hand(const std::string& job_id, int attempt, const std::string& node_id) {
  MutexLock lock(mu_);
  return assigned_.insert(Key(job_id, attempt, node_id)).second;
}

bool Delivery::HandStop(const std::string& job_id, int attempt, const std::string& node_id) {
  MutexLock lock(mu_);
  return stops_.insert(Key(job_id, attempt, node_id)).second;
}

void Delivery::OfferAgain(const std::string& job_id, int attempt, const std::string& node_id) {
  MutexLock lock(mu_);
  assigned_.erase(Key(job_id, attempt, node_id));
}

void Delivery::Forget(const std::string& job_id, int attempt, const std::string& node_id) {
  MutexLock lock(mu_);
  assigned_.erase(Key(job_id, attempt, node_id));
  stops_.erase(Key(job_id, attempt, node_id));
}

void Delivery::HoldBack(const std::string& job_id) {
  MutexLock lock(mu_);
  uncommitted_.insert(job_id);
}

void Delivery::Unhold(const std::string& job_id) {
  MutexLock lock(mu_);
  uncommitted_.erase(job_id);
}

bool Delivery::HeldBack(const std::string& job_id) const {
  MutexLock lock(mu_);
  return uncommitted_.count(job_id) > 0;
}

void Delivery::Committed() {
  MutexLock lock(mu_);
  uncommitted_.clear();
}

}  // namespace tide::server
