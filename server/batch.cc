// The core's batches (sweeps) and job dependencies: submission of a whole
// batch in one transaction, the gate that holds queued trials back for
// their batch's max_concurrent and budget and jobs for their dependencies,
// and the views. See docs/batches.md.
//
// Money: a batch holds its budget (or, without one, the sum of its trials'
// worst cases) in one escrow account, escrow:<batch id>; its trials are
// charged from it and it returns to the owner when the last trial ends. A
// trial starts only if what the budget has left, after the most the
// running trials may still cost, covers the most the trial may cost; so a
// budget is never overrun and no trial is cut off for want of it.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>

#include "common/token.h"
#include "ledger/money.h"
#include "server/core.h"

namespace tide::server {

using api::Job;
using api::JobStatus;
using ledger::Micros;

namespace {
bool Active(JobStatus s) { return s == JobStatus::kStarting || s == JobStatus::kRunning; }
}  // namespace

void Core::PersistBatch(const BatchEntry& b, store::WriteBatch& batch) const {
  batch.batches.push_back({b.batch.id, b.batch.owner, b.batch.created_at, api::ToJson(b.batch).dump()});
}

void Core::CountTrialLocked(const Job& job, JobStatus from, JobStatus to) {
  if (job.batch.empty() || from == to) return;
  auto it = batches_.find(job.batch);
  if (it == batches_.end()) return;
  BatchEntry& b = it->second;
  if (Active(from)) b.active -= 1;
  if (Active(to)) b.active += 1;
  if (!api::IsTerminal(from) && api::IsTerminal(to)) b.open -= 1;
}

Status Core::RecoverBatchesLocked(const store::Contents& contents) {
  for (const auto& row : contents.batches) {
    auto b = api::BatchFromJson(nlohmann::json::parse(row.doc, nullptr, false));
    if (!b.ok()) return b.status().WithContext("batch " + row.id);
    batches_[row.id].batch = std::move(b).value();
  }
  // job_order_ is submission order, which is the order of each batch's file.
  for (const auto& id : job_order_) {
    JobEntry& e = jobs_.at(id);
    if (e.job.status == JobStatus::kQueued &&
        (!e.job.batch.empty() || !e.job.spec.depends_on.empty())) {
      gated_[e.order] = id;
    }
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

// ------------------------------------------------------------------ commands

Result<std::pair<BatchInfo, bool>> Core::SubmitBatch(const Caller& caller, const api::BatchSpec& spec,
                                                     const std::string& idempotency_key) {
  if (caller.scope != Scope::kUser && caller.scope != Scope::kAdmin) {
    return Status::PermissionDenied("only users submit batches");
  }
  // Build every trial's spec before taking the core: a bad trial refuses
  // the whole file and nothing is created.
  std::vector<api::JobSpec> specs;
  specs.reserve(spec.trials.size());
  for (const auto& t : spec.trials) {
    auto s = api::TrialJobSpec(spec, t);
    if (!s.ok()) return s.status();
    if (!s->code.empty() && code_checker_ && !code_checker_(caller.subject, s->code)) {
      return Status::InvalidArgument("no uploaded code archive with this id (POST /v1/code first)",
                                     "template.code");
    }
    specs.push_back(std::move(s).value());
  }
  std::string id;
  bool created = false;
  Status st = Run([&](store::WriteBatch& batch) {
    if (!idempotency_key.empty()) {
      auto it = idempotency_.find({caller.subject, idempotency_key});
      if (it != idempotency_.end()) {
        if (!batches_.count(it->second)) {
          return Status::Conflict("Idempotency-Key was used for job " + it->second);
        }
        id = it->second;
        return Status::Ok();
      }
    }
    do {
      id = NewId("b-");
    } while (batches_.count(id) || jobs_.count(id));
    // Admission: the budget, or the most every trial may cost, is held now.
    Micros worst = 0;
    for (const auto& s : specs) worst += WorstCaseLocked(s, MaxRateLocked(s));
    Micros hold = spec.budget > 0 ? spec.budget : worst;
    if (hold > 0) {
      Micros available = ledger_.Balance(ledger::UserAccount(caller.subject));
      if (available < hold) {
        return Status::InsufficientCredit(
            std::string("the batch may cost up to ") + ledger::FormatCredits(hold) + " credits (" +
            (spec.budget > 0 ? "its budget" :
                               std::to_string(specs.size()) + " trials at their worst case; a "
                               "budget caps the whole batch") +
            "), but " + ledger::FormatCredits(available) +
            " are available; redeem a card (tide redeem CODE) or set a lower budget");
      }
      TIDE_RETURN_IF_ERROR(CheckDailyCapLocked(caller.subject, hold));
    }
    const int64_t now = clock_->NowMs();
    BatchEntry& b = batches_[id];
    b.batch.id = id;
    b.batch.owner = caller.subject;
    b.batch.name = spec.name;
    b.batch.max_concurrent = spec.max_concurrent;
    b.batch.retry_times = spec.retry_times;
    b.batch.budget = spec.budget;
    b.batch.job_template = spec.job_template;
    b.batch.trials = static_cast<int>(spec.trials.size());
    b.batch.created_at = now;
    if (hold > 0) {
      ledger::Transaction tx;
      tx.kind = "hold";
      tx.job_id = id;
      tx.entries = {{ledger::UserAccount(caller.subject), -hold}, {ledger::EscrowAccount(id), hold}};
      Status held = ApplyTxLocked(std::move(tx));
      if (!held.ok()) {
        batches_.erase(id);
        return held;
      }
    }
    PersistBatch(b, batch);
    b.jobs.reserve(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      // Trial ids sort in the file's order (the store reads jobs back by
      // creation time, then id, and a batch's trials share their time).
      Job job;
      std::string n = std::to_string(i + 1);
      job.id = "j-" + id.substr(2) + "-" + std::string(n.size() < 5 ? 5 - n.size() : 0, '0') + n;
      job.owner = caller.subject;
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
      AddJobLocked(std::move(job), batch);
    }
    if (!idempotency_key.empty()) {
      idempotency_[{caller.subject, idempotency_key}] = id;
      batch.idempotency.push_back({caller.subject, idempotency_key, id});
    }
    created = true;
    return Status::Ok();
  });
  if (!st.ok()) return st;
  std::shared_lock lock(state_mu_);
  return std::make_pair(BatchInfoLocked(batches_.at(id)), created);
}

Result<BatchInfo> Core::CancelBatch(const Caller& caller, const std::string& id) {
  Status st = Run([&](store::WriteBatch& batch) {
    auto it = batches_.find(id);
    if (it == batches_.end() ||
        (caller.scope != Scope::kAdmin && it->second.batch.owner != caller.subject)) {
      return Status::NotFound("no batch " + id);
    }
    BatchEntry& b = it->second;
    if (!b.batch.cancel_requested) {
      b.batch.cancel_requested = true;
      PersistBatch(b, batch);
    }
    for (const std::string& job_id : b.jobs) {
      JobEntry& e = jobs_.at(job_id);
      if (!api::IsTerminal(e.job.status) && !e.job.cancel_requested) {
        CancelLocked(e, "cancelled", batch);
      }
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  std::shared_lock lock(state_mu_);
  return BatchInfoLocked(batches_.at(id));
}

// ------------------------------------------------------------------ the gate

int Core::DependencyStateLocked(const api::JobSpec::Dependency& dep) const {
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
  if (auto j = jobs_.find(dep.job); j != jobs_.end()) {
    look(j->second.job);
  } else if (auto b = batches_.find(dep.job); b != batches_.end()) {
    for (const auto& id : b->second.jobs) look(jobs_.at(id).job);
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

void Core::GateQueueLocked(store::WriteBatch& batch) {
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
    JobEntry& e = jobs_.at(id);
    std::string wait;
    for (const auto& dep : e.job.spec.depends_on) {
      int state = DependencyStateLocked(dep);
      if (state < 0) {
        never.emplace_back(id, "dependency_never_satisfied");
        wait = "-";
        break;
      }
      if (state == 0 && wait.empty()) wait = "waiting for " + dep.job + " (" + dep.condition + ")";
    }
    if (wait == "-") continue;
    if (wait.empty() && !e.job.batch.empty()) {
      const BatchEntry& b = batches_.at(e.job.batch);
      auto [r, fresh] = rooms.try_emplace(e.job.batch);
      Room& room = r->second;
      if (fresh) {
        if (b.batch.max_concurrent > 0) room.slots = std::max(0, b.batch.max_concurrent - b.active);
        if (b.batch.budget > 0) {
          room.budget = true;
          room.budget_left = ledger_.Balance(ledger::EscrowAccount(b.batch.id));
          for (const auto& tid : b.jobs) {
            const JobEntry& t = jobs_.at(tid);
            if (Active(t.job.status)) room.budget_left -= AttemptReserveLocked(t);
          }
        }
      }
      Micros need = 0;
      if (room.slots > 0 && room.budget) {
        const api::JobSpec& s = e.job.spec;
        std::string key = std::to_string(s.resources.gpu_count) + "x" + std::to_string(s.resources.nodes) +
                          ":" + std::to_string(s.resources.gpu_memory_mb) + ":" + s.tier + ":" +
                          std::to_string(s.max_price) + ":" + std::to_string(s.max_runtime_s) + ":" +
                          std::to_string(s.grace_s) + ":" + std::to_string(s.max_cost);
        for (const auto& t : s.resources.gpu_types) key += ":" + t;
        for (const auto& [k, v] : s.constraints) key += ";" + k + "=" + v;
        auto [it, fresh_need] = room.need.try_emplace(key, 0);
        if (fresh_need) it->second = AttemptCapLocked(s, MaxRateLocked(s));
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
    }
  }
  for (const auto& [id, reason] : never) {
    JobEntry& e = jobs_.at(id);
    spdlog::info("job {} cannot start ({}): cancelled", id, reason);
    CancelLocked(e, reason, batch);
  }
}

// ------------------------------------------------------------------ views

BatchInfo Core::BatchInfoLocked(const BatchEntry& b) const {
  BatchInfo info;
  info.batch = b.batch;
  bool started = false;
  for (const auto& id : b.jobs) {
    const JobEntry& e = jobs_.at(id);
    info.counts[api::JobStatusName(e.job.status)] += 1;
    info.cost += ChargedLocked(e.job);
    started = started || !e.job.attempts.empty();
    if (api::IsTerminal(e.job.status)) info.finished_at = std::max(info.finished_at, e.job.finished_at);
  }
  info.escrow = ledger_.Balance(ledger::EscrowAccount(b.batch.id));
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

Result<BatchInfo> Core::GetBatch(const Caller& caller, const std::string& id) const {
  std::shared_lock lock(state_mu_);
  auto it = batches_.find(id);
  if (it == batches_.end() ||
      (caller.scope != Scope::kAdmin && it->second.batch.owner != caller.subject)) {
    return Status::NotFound("no batch " + id);
  }
  return BatchInfoLocked(it->second);
}

std::vector<BatchInfo> Core::ListBatches(const Caller& caller) const {
  std::shared_lock lock(state_mu_);
  std::vector<const BatchEntry*> mine;
  for (const auto& [id, b] : batches_) {
    if (caller.scope == Scope::kAdmin || b.batch.owner == caller.subject) mine.push_back(&b);
  }
  std::sort(mine.begin(), mine.end(), [](const BatchEntry* a, const BatchEntry* b) {
    return std::tie(a->batch.created_at, a->batch.id) > std::tie(b->batch.created_at, b->batch.id);
  });
  std::vector<BatchInfo> out;
  for (const BatchEntry* b : mine) out.push_back(BatchInfoLocked(*b));
  return out;
}

Result<std::vector<Job>> Core::BatchTrials(const Caller& caller, const std::string& id) const {
  std::shared_lock lock(state_mu_);
  auto it = batches_.find(id);
  if (it == batches_.end() ||
      (caller.scope != Scope::kAdmin && it->second.batch.owner != caller.subject)) {
    return Status::NotFound("no batch " + id);
  }
  std::vector<Job> out;
  out.reserve(it->second.jobs.size());
  for (const auto& job_id : it->second.jobs) out.push_back(jobs_.at(job_id).job);
  return out;
}

}  // namespace tide::server
