#include "server/core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/token.h"
#include "scheduler/estimate.h"

namespace tide::server {

using api::Job;
using api::JobStatus;
using ledger::Micros;

Core::Core(store::Store* store, Clock* clock, CoreOptions options)
    : store_(store),
      clock_(clock),
      options_(options),
      jobs_(clock, &delivery_),
      accounts_(clock, options.default_job_cap),
      batches_(clock, &jobs_, &accounts_),
      planner_(clock, &jobs_, &accounts_, &batches_),
      telemetry_(options.telemetry),
      reconciler_(clock, &jobs_, &delivery_, &telemetry_,
                  {options.node_timeout_ms, options.report_grace_ms}) {
  jobs_.set_listener(this);
}

Core::~Core() { Stop(); }

// ------------------------------------------------------------------ the rooms wired

void Core::AttemptEnding(JobEntry& e, int64_t now) {
  accounts_.Meter(e, now, jobs_);  // the last seconds of the attempt
}

void Core::AttemptEnded(const JobEntry& e, const api::Attempt& a, int64_t now) {
  planner_.fair().Charge(e.job.owner, api::AttemptGpuSeconds(a, now), now);
}

void Core::StatusChanged(JobEntry& e, JobStatus from) {
  // The batch's counts first: its escrow returns only with its last trial.
  const bool batch_done = batches_.StatusChanged(e, from);
  if (!api::IsTerminal(e.job.status) || api::IsTerminal(from)) return;
  telemetry_.JobEnded(e.job.id);
  if (e.job.batch.empty()) {
    accounts_.Release(e.job.id, e.job.owner);
  } else if (batch_done) {
    accounts_.Release(e.job.batch, e.job.owner);
  }
}

// ------------------------------------------------------------------ startup

Status Core::Recover() {
  auto contents = store_->LoadAll();
  if (!contents.ok()) return contents.status().WithContext("load store");
  WriterLock lock(state_mu_);
  for (auto& row : contents->users) {
    users_[row.id] = UserInfo{row.id, row.name, row.created_at};
    user_names_[row.name] = row.id;
  }
  tokens_.Load(contents->tokens);
  audit_.Load(contents->audit);
  for (auto& row : contents->idempotency) idempotency_[{row.owner, row.key}] = row.job_id;
  // Rows first, then what is derived from them; leases on nodes the store
  // does not hold are repaired last, through the same transitions as ever.
  TIDE_RETURN_IF_ERROR(jobs_.Load(*contents));
  TIDE_RETURN_IF_ERROR(batches_.Load(*contents));
  accounts_.Recover(*contents, jobs_);
  planner_.Recover(*contents);
  jobs_.Repair();
  spdlog::info("recovered {} jobs, {} nodes, {} users from the store", jobs_.size(),
               jobs_.nodes().size(), users_.size());
  return Status::Ok();
}

Result<std::string> Core::EnsureAdminToken() {
  std::string token;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    if (tokens_.Any("admin")) return Status::Ok();
    store::TokenRow row;
    row.kind = "admin";
    row.subject = "admin";
    token = tokens_.Issue("tide_a_", row, clock_->NowMs(), batch);
    row.hash = Sha256Hex(token);
    audit_.Record(batch, clock_->NowMs(), Caller{Scope::kAdmin, "server"}, "token.create",
                  Tokens::IdOf(row), {{"kind", "admin"}});
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return token;
}

void Core::Start() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  started_ = true;
  thread_ = std::thread([this] { Loop(); });
  estimator_ = std::thread([this] { EstimateLoop(); });
}

// Expected starts come from a what-if run of the scheduler over a copy of
// the state, so it never holds up the core thread.
void Core::EstimateLoop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      if (estimate_cv_.wait_for(lock, std::chrono::milliseconds(options_.estimate_interval_ms),
                                [&] { return stopping_; })) {
        return;
      }
    }
    const int64_t now = clock_->NowMs();
    SchedulerInput in;
    {
      ReaderLock lock(state_mu_);
      if (jobs_.queued().empty()) continue;
      in = planner_.Snapshot(now);
    }
    auto starts = sched::ExpectedStarts({in.nodes, in.queue, in.running, in.shares, in.config, now});
    std::lock_guard<std::mutex> lock(estimate_mu_);
    estimates_ = std::move(starts);
    estimated_at_ = now;
  }
}

void Core::Stop() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  queue_cv_.notify_all();
  estimate_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (estimator_.joinable()) estimator_.join();
}

// ------------------------------------------------------------------ the loop

Status Core::Run(Command command) {
  Pending p;
  p.command = std::move(command);
  std::unique_lock<std::mutex> lock(queue_mu_);
  if (stopping_ || !started_) {
    // Before Start() (recovery, first admin token) commands run inline.
    if (!started_ && !stopping_) {
      store::WriteBatch batch;
      std::vector<DeletedBlobs> deleted;
      {
        WriterLock state(state_mu_);
        Apply(p, batch);
        accounts_.TakeRows(batch.ledger);
        deleted.swap(deleted_);
      }
      if (p.result.ok() && !batch.empty()) p.result = store_->Write(batch);
      if (p.result.ok() && !deleted.empty() && blob_deleter_) blob_deleter_(deleted);
      return p.result;
    }
    return Status::Unavailable("server is shutting down");
  }
  queue_.push_back(&p);
  queue_cv_.notify_one();
  done_cv_.wait(lock, [&] { return p.done; });
  return p.result;
}

void Core::Apply(Pending& p, store::WriteBatch& batch) {
  store::WriteBatch own;
  quiet_changes_ = 0;
  p.result = p.command(own);
  const size_t quiet = quiet_changes_;
  if (!p.result.ok()) return;  // what it changed in the rooms goes with the next one
  std::vector<std::string> added;
  JobState::Flushed f = jobs_.Flush(own, &added);
  // New jobs (and a new batch of them) need only a pass over themselves;
  // jobs that changed but free nothing (a queued job cancelled) a full pass
  // at the next tick; anything else may change what the scheduler decides now.
  // (Tokens alone change nothing the scheduler sees: a login, a new token.)
  bool only_jobs = own.nodes.empty() && own.users.empty() && own.cards.empty() &&
                   own.settings.empty();
  if (!only_jobs || f.changed > quiet) {
    planner_.NeedFullPass();
  } else {
    if (f.changed > 0) planner_.NeedFullPassSoon();
    if (!added.empty()) planner_.Submitted(added);
  }
  batch.Append(std::move(own));
}

void Core::Tick(store::WriteBatch& batch) {
  planner_.Tick();
  const int64_t now_mono = clock_->MonotonicMs();
  if (now_mono - last_meter_mono_ >= options_.meter_interval_ms) {
    last_meter_mono_ = now_mono;
    const Batches* batches = &batches_;  // the callback runs here, under the lock
    for (const std::string& id : accounts_.MeterAll(
             jobs_, [&](const std::string& batch) { return batches->HasBudget(batch); })) {
      jobs_.Cancel(jobs_.At(id), "budget_exceeded");
    }
  }
  reconciler_.LoseSilentNodes();
  // Sessions and login links past their end leave the store once a minute.
  if (now_mono - last_session_sweep_mono_ >= 60'000) {
    last_session_sweep_mono_ = now_mono;
    const int64_t now = clock_->NowMs();
    for (const std::string& hash : tokens_.HashesWhere([&](const store::TokenRow& r) {
           return (r.kind == "session" || r.kind == "login") && r.expires_at != 0 &&
                  r.expires_at <= now;
         })) {
      tokens_.Revoke(hash, batch);
    }
  }
  // Retention: at most 200 deletions a minute, so a long backlog is worked
  // off in pieces (their files are removed on this thread after the write).
  if (options_.retention_ms > 0 && now_mono - last_retention_mono_ >= 60'000) {
    last_retention_mono_ = now_mono;
    std::vector<std::string> expired = PastRetention(clock_->NowMs(), 200);
    if (!expired.empty()) {
      spdlog::info("retention: deleting the data of {} jobs that ended more than {} s ago",
                   expired.size(), options_.retention_ms / 1000);
      Delete(expired, Caller{Scope::kAdmin, "server"}, batch);
    }
  }
}

// Why group commit: an fsync costs milliseconds here, so one transaction per
// request would cap submissions at a few hundred per second. The loop takes
// every command queued while the previous transaction was being written,
// applies them all, and writes them in one transaction. A command's caller
// is released only after that transaction is durable. If the write fails the
// in-memory state is ahead of the store, which we cannot undo piecemeal: the
// process exits and recovery reloads the last durable state.
void Core::Loop() {
  int64_t next_tick = clock_->MonotonicMs();
  while (true) {
    std::vector<Pending*> work;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait_for(lock, std::chrono::milliseconds(options_.tick_ms),
                         [&] { return stopping_ || !queue_.empty(); });
      if (stopping_ && queue_.empty()) break;
      work.assign(queue_.begin(), queue_.end());
      queue_.clear();
    }
    store::WriteBatch batch;
    bool changed = false;
    std::vector<DeletedBlobs> deleted;
    {
      WriterLock state(state_mu_);
      for (Pending* p : work) Apply(*p, batch);
      if (clock_->MonotonicMs() >= next_tick) {
        Tick(batch);
        if (jobs_.Flush(batch).changed > 0) planner_.NeedFullPass();
        tokens_.FlushUsed(batch);  // last use, about once a minute per token
        next_tick = clock_->MonotonicMs() + options_.tick_ms;
      }
      if (planner_.PassDue()) planner_.Pass();
      jobs_.Flush(batch);  // what the pass placed, and any command's leftovers
      // The money moved by this batch is written with it.
      accounts_.TakeRows(batch.ledger);
      changed = !batch.empty();
      deleted.swap(deleted_);
    }
    if (changed) {
      Status st = store_->Write(batch);
      if (!st.ok()) {
        spdlog::critical("store write failed, exiting so recovery can reload: {}", st.ToString());
        std::_Exit(70);
      }
      // Placements of this batch are durable now: agents may get them.
      delivery_.Committed();
      // Deletions too: their blobs go before anyone is told.
      if (!deleted.empty() && blob_deleter_) blob_deleter_(deleted);
    }
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      for (Pending* p : work) p->done = true;
    }
    done_cv_.notify_all();
    if (changed || !work.empty()) NotifyChange();
  }
}

// ------------------------------------------------------------------ notification

uint64_t Core::epoch() const {
  std::lock_guard<std::mutex> lock(notify_mu_);
  return epoch_;
}

void Core::NotifyChange() {
  {
    std::lock_guard<std::mutex> lock(notify_mu_);
    ++epoch_;
  }
  notify_cv_.notify_all();
}

void Core::WaitChange(uint64_t seen, int64_t deadline_mono_ms) const {
  std::unique_lock<std::mutex> lock(notify_mu_);
  int64_t left = deadline_mono_ms - clock_->MonotonicMs();
  if (left <= 0) return;
  notify_cv_.wait_for(lock, std::chrono::milliseconds(std::min<int64_t>(left, 1000)),
                      [&] { return epoch_ != seen; });
}

}  // namespace tide::server
