#include "server/batches.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <tuple>

#include "common/token.h"

namespace tide::server {

using api::Job;
using api::JobStatus;
using ledger::Micros;
using nlohmann::json;

namespace {
bool Active(JobStatus s) { return s == JobStatus::kStarting || s == JobStatus::kRunning; }
}  // namespace

void Batches::Persist(const Entry& b, store::WriteBatch& batch) const {
  batch.batches.push_back({b.batch.id, b.batch.owner, b.batch.created_at, api::ToJson(b.batch).dump()});
}

Status Batches::Load(const store::Contents& contents) {
  for (const auto& row : contents.batches) {
    auto b = api::BatchFromJson(nlohmann::json::parse(row.doc, nullptr, false));
    if (!b.ok()) return b.status().WithContext("batch " + row.id);
    batches_[row.id].batch = std::move(b).value();
  }
  // The jobs' order is submission order, which is the order of each batch's file.
  for (const auto& id : jobs_->order()) {
    const JobEntry& e = jobs_->At(id);
    if (e.job.status == JobStatus::kQueued && Gated(e.job)) gated_[e.order] = id;
    if (e.job.batch.empty()) continue;
    auto b = batches_.find(e.job.batch);
    if (b == batches_.end()) {
      return Status::Internal("job " + id + " is a trial of batch " + e.job.batch +
                              ", which the store does not hold");
    }
    b->second.jobs.push_back(id);
    if (!api::IsTerminal(e.job.status)) b->second.open += 1;
    if (Active(e.job.status)) b->second.active += 1;
  }
  return Status::Ok();
}

const api::Batch* Batches::Find(const std::string& id, const std::string& owner) const {
  auto it = batches_.find(id);
  if (it == batches_.end() || (!owner.empty() && it->second.batch.owner != owner)) return nullptr;
  return &it->second.batch;
}

bool Batches::HasBudget(const std::string& id) const {
  auto it = batches_.find(id);
  return it != batches_.end() && it->second.batch.budget > 0;
}

bool Batches::StatusChanged(const JobEntry& e, JobStatus from) {
  const JobStatus to = e.job.status;
  if (to == JobStatus::kQueued) {
    if (Gated(e.job)) gated_[e.order] = e.job.id;
  } else {
    gated_.erase(e.order);
    held_.erase(e.job.id);
  }
  if (e.job.batch.empty()) return false;
  auto it = batches_.find(e.job.batch);
  if (it == batches_.end()) return false;
  Entry& b = it->second;
  if (from != to) {
    if (Active(from)) b.active -= 1;
    if (Active(to)) b.active += 1;
    if (!api::IsTerminal(from) && api::IsTerminal(to)) b.open -= 1;
  }
  return b.open == 0;
}

// ------------------------------------------------------------------ commands

Result<std::string> Batches::Submit(const std::string& owner, const api::BatchSpec& spec,
                                    std::vector<api::JobSpec> specs, store::WriteBatch& batch) {
  std::string id;
  do {
    id = NewId("b-");
  } while (batches_.count(id) || jobs_->Has(id));
  // Admission: the budget, or the most every trial may cost, is held now.
  Micros worst = 0;
  for (const auto& s : specs) worst += accounts_->WorstCase(s, accounts_->MaxRate(s, *jobs_));
  const Micros hold = spec.budget > 0 ? spec.budget : worst;
  TIDE_RETURN_IF_ERROR(accounts_->Admit(
      owner, id, hold, "the batch",
      spec.budget > 0 ? "its budget"
                      : std::to_string(specs.size()) +
                            " trials at their worst case; a budget caps the whole batch",
      "set a lower budget"));
  const int64_t now = clock_->NowMs();
  Entry& b = batches_[id];
  b.batch.id = id;
  b.batch.owner = owner;
  b.batch.name = spec.name;
  b.batch.max_concurrent = spec.max_concurrent;
  b.batch.retry_times = spec.retry_times;
  b.batch.budget = spec.budget;
  b.batch.job_template = spec.job_template;
  // The trials carry the secrets' values; the batch keeps their names.
  if (auto s = b.batch.job_template.find("secrets"); s != b.batch.job_template.end() && s->is_object()) {
    json names = json::array();
    for (auto& [name, value] : s->items()) names.push_back(name);
    *s = names;
  }
  b.batch.trials = static_cast<int>(spec.trials.size());
  b.batch.created_at = now;
  Persist(b, batch);
  b.jobs.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    // Trial ids sort in the file's order (the store reads jobs back by
    // creation time, then id, and a batch's trials share their time).
    Job job;
    std::string n = std::to_string(i + 1);
    job.id = "j-" + id.substr(2) + "-" + std::string(n.size() < 5 ? 5 - n.size() : 0, '0') + n;
    job.owner = owner;
    job.spec = std::move(specs[i]);
    job.spec.tags.push_back("batch:" + id);
    job.status = JobStatus::kQueued;
    job.created_at = now;
    job.pending_reason = "waiting for the scheduler";
    job.batch = id;
    job.trial = spec.trials[i].id;
    for (auto& [k, v] : spec.trials[i].params.items()) job.params[k] = api::ParamText(v);
    b.jobs.push_back(job.id);
    b.open += 1;
    jobs_->Add(std::move(job));
  }
  return id;
}

void Batches::Cancel(const std::string& id, store::WriteBatch& batch) {
  Entry& b = batches_.at(id);
  if (!b.batch.cancel_requested) {
    b.batch.cancel_requested = true;
    Persist(b, batch);
  }
  for (const std::string& job_id : b.jobs) {
    JobEntry& e = jobs_->At(job_id);
    if (!api::IsTerminal(e.job.status) && !e.job.cancel_requested) jobs_->Cancel(e, "cancelled");
  }
}

// ------------------------------------------------------------------ the gate

int Batches::DependencyState(const api::JobSpec::Dependency& dep) const {
  // The outcome of what is depended on: a job, or every trial of a batch.
  bool ended = true, all_ok = true, any_bad = false;
  auto look = [&](const Job& job) {
    if (!api::IsTerminal(job.status)) {
      ended = false;
      return;
    }
    bool ok = job.status == JobStatus::kCompleted;
    all_ok = all_ok && ok;
    any_bad = any_bad || !ok;
  };
  if (const JobEntry* j = jobs_->Find(dep.job)) {
    look(j->job);
  } else if (auto b = batches_.find(dep.job); b != batches_.end()) {
    for (const auto& id : b->second.jobs) look(jobs_->At(id).job);
  } else {
    return -1;
  }
  if (dep.condition == "afterok") {
    if (any_bad) return -1;  // a failure can only show earlier than the end
    return ended ? 1 : 0;
  }
  if (!ended) return 0;
  if (dep.condition == "afternotok") return any_bad ? 1 : -1;
  return 1;  // afterany
}

const std::string* Batches::Held(const std::string& job_id) const {
  auto it = held_.find(job_id);
  return it == held_.end() ? nullptr : &it->second;
}

void Batches::Gate() {
  held_.clear();
  if (gated_.empty()) return;
  // What each batch may still start in this pass.
  struct Room {
    int slots = INT_MAX;
    Micros budget_left = 0;
    bool budget = false;
    bool admitted = false;
    // The most a trial may cost, for trials asking for the same: the
    // price of the dearest node they fit is worth computing once.
    std::unordered_map<std::string, Micros> need;
  };
  std::unordered_map<std::string, Room> rooms;
  std::vector<std::pair<std::string, std::string>> never;  // job, reason
  const std::vector<std::pair<uint64_t, std::string>> gated(gated_.begin(), gated_.end());
  for (const auto& [order, id] : gated) {
    JobEntry& e = jobs_->At(id);
    std::string wait;
    for (const auto& dep : e.job.spec.depends_on) {
      int state = DependencyState(dep);
      if (state < 0) {
        never.emplace_back(id, "dependency_never_satisfied");
        wait = "-";
        break;
      }
      if (state == 0 && wait.empty()) wait = "waiting for " + dep.job + " (" + dep.condition + ")";
    }
    if (wait == "-") continue;
    if (wait.empty() && !e.job.batch.empty()) {
      const Entry& b = batches_.at(e.job.batch);
      auto [r, fresh] = rooms.try_emplace(e.job.batch);
      Room& room = r->second;
      if (fresh) {
        if (b.batch.max_concurrent > 0) room.slots = std::max(0, b.batch.max_concurrent - b.active);
        if (b.batch.budget > 0) {
          room.budget = true;
          room.budget_left = accounts_->EscrowBalance(b.batch.id);
          for (const auto& tid : b.jobs) {
            const JobEntry& t = jobs_->At(tid);
            if (Active(t.job.status)) room.budget_left -= accounts_->AttemptReserve(t);
          }
        }
      }
      Micros need = 0;
      if (room.slots > 0 && room.budget) {
        const api::JobSpec& s = e.job.spec;
        std::string key = std::to_string(s.resources.gpu_count) + "x" +
                          std::to_string(s.resources.nodes) + ":" +
                          std::to_string(s.resources.gpu_memory_mb) + ":" + s.tier + ":" +
                          std::to_string(s.max_price) + ":" + std::to_string(s.max_runtime_s) +
                          ":" + std::to_string(s.grace_s) + ":" + std::to_string(s.max_cost);
        for (const auto& t : s.resources.gpu_types) key += ":" + t;
        for (const auto& [k, v] : s.constraints) key += ";" + k + "=" + v;
        auto [it, fresh_need] = room.need.try_emplace(key, 0);
        if (fresh_need) it->second = accounts_->AttemptCap(s, accounts_->MaxRate(s, *jobs_));
        need = it->second;
      }
      if (room.slots <= 0) {
        wait = "batch " + b.batch.id + ": " + std::to_string(b.active) + " of max_concurrent " +
               std::to_string(b.batch.max_concurrent) + " trials running";
      } else if (room.budget && need > room.budget_left) {
        if (b.active == 0 && !room.admitted) {
          never.emplace_back(id, "budget_exceeded");
          continue;
        }
        wait = "batch " + b.batch.id + " budget: " +
               ledger::FormatCredits(std::max<Micros>(0, room.budget_left)) +
               " credits left after what running trials may cost; this trial may cost up to " +
               ledger::FormatCredits(need);
      } else {
        room.slots -= 1;
        room.budget_left -= need;
        room.admitted = true;
      }
    }
    if (!wait.empty()) {
      held_[id] = wait;
      e.job.pending_reason = wait;
      e.job.pending_reason_provisional = false;
    }
  }
  for (const auto& [id, reason] : never) {
    spdlog::info("job {} cannot start ({}): cancelled", id, reason);
    jobs_->Cancel(jobs_->At(id), reason);
  }
}

// ------------------------------------------------------------------ views

BatchInfo Batches::Info(const std::string& id) const {
  const Entry& b = batches_.at(id);
  BatchInfo info;
  info.batch = b.batch;
  bool started = false;
  for (const auto& job_id : b.jobs) {
    const Job& job = jobs_->At(job_id).job;
    info.counts[api::JobStatusName(job.status)] += 1;
    info.cost += accounts_->Charged(job);
    started = started || !job.attempts.empty();
    if (api::IsTerminal(job.status)) info.finished_at = std::max(info.finished_at, job.finished_at);
  }
  info.escrow = accounts_->EscrowBalance(b.batch.id);
  if (b.open > 0) {
    info.finished_at = 0;
    info.status = started ? "running" : "queued";
  } else if (info.counts["completed"] == static_cast<int>(b.jobs.size())) {
    info.status = "completed";
  } else if (info.counts["failed"] > 0) {
    info.status = "failed";
  } else {
    info.status = "cancelled";
  }
  return info;
}

std::vector<BatchInfo> Batches::List(const std::string& owner) const {
  std::vector<const Entry*> mine;
  for (const auto& [id, b] : batches_) {
    if (owner.empty() || b.batch.owner == owner) mine.push_back(&b);
  }
  std::sort(mine.begin(), mine.end(), [](const Entry* a, const Entry* b) {
    return std::tie(a->batch.created_at, a->batch.id) > std::tie(b->batch.created_at, b->batch.id);
  });
  std::vector<BatchInfo> out;
  for (const Entry* b : mine) out.push_back(Info(b->batch.id));
  return out;
}

std::vector<Job> Batches::Trials(const std::string& id) const {
  const Entry& b = batches_.at(id);
  std::vector<Job> out;
  out.reserve(b.jobs.size());
  for (const auto& job_id : b.jobs) out.push_back(jobs_->At(job_id).job);
  return out;
}

}  // namespace tide::server
