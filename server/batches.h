// Batches: sweeps of many trials of one job template, and the gate that
// holds queued jobs back for their batch's max_concurrent and budget or for
// their dependencies. See docs/batches.md.
//
// Money: a batch holds its budget (or, without one, the sum of its trials'
// worst cases) in one escrow account, escrow:<batch id>; its trials are
// charged from it and it returns to the owner when the last trial ends. A
// trial starts only if what the budget has left, after the most the
// running trials may still cost, covers the most the trial may cost; so a
// budget is never overrun and no trial is cut off for want of it.
//
// Not thread-safe on its own: the core's state lock guards it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "api/batch.h"
#include "api/types.h"
#include "ledger/money.h"
#include "server/accounts.h"
#include "server/job_state.h"
#include "store/store.h"

namespace tide::server {

// A batch with what its trials add up to.
struct BatchInfo {
  api::Batch batch;
  std::map<std::string, int> counts;  // trials by job status
  // queued (no trial started yet), running, completed (every trial
  // completed), failed (some trial failed), cancelled.
  std::string status;
  ledger::Micros cost = 0;    // charged to its trials so far
  ledger::Micros escrow = 0;  // still held for it
  int64_t finished_at = 0;    // when its last trial ended; 0 while one lives
};

class Batches {
 public:
  Batches(Clock* clock, JobState* jobs, Accounts* accounts)
      : clock_(clock), jobs_(jobs), accounts_(accounts) {}

  // Reads the batch rows back; the jobs must be loaded first.
  Status Load(const store::Contents& contents);

  bool Has(const std::string& id) const { return batches_.count(id) > 0; }
  // The batch `id` if `owner` may see it ("" = anyone may).
  const api::Batch* Find(const std::string& id, const std::string& owner) const;

  // Creates every trial of `spec` as a queued job with the batch's budget
  // (or its trials' worst case) held in escrow. `specs` are the trials'
  // checked job specs, in the file's order.
  Result<std::string> Submit(const std::string& owner, const api::BatchSpec& spec,
                             std::vector<api::JobSpec> specs, store::WriteBatch& batch);
  // Cancels every trial that has not ended.
  void Cancel(const std::string& id, store::WriteBatch& batch);

  // A job moved from `from` to its status: the gate's lists and the
  // batch's counts follow. True if its batch has no trial left open.
  bool StatusChanged(const JobEntry& e, api::JobStatus from);

  // Before a pass: which queued jobs must wait (Held, with the reason)
  // for their batch's max_concurrent or budget, or for their dependencies;
  // those that can never start are cancelled now.
  void Gate();
  // The reason `job_id` is held back from this pass, or nullptr.
  const std::string* Held(const std::string& job_id) const;
  bool HasBudget(const std::string& id) const;

  // --- views ---
  BatchInfo Info(const std::string& id) const;
  // Newest first; `owner` "" = all.
  std::vector<BatchInfo> List(const std::string& owner) const;
  // The batch's trials in the order of the file.
  std::vector<api::Job> Trials(const std::string& id) const;
  // How a dependency of a queued job stands: 1 met, 0 not yet, -1 never.
  int DependencyState(const api::JobSpec::Dependency& dep) const;

 private:
  struct Entry {
    api::Batch batch;
    std::vector<std::string> jobs;  // trial job ids, in file order
    int open = 0;                   // trials not ended
    int active = 0;                 // trials starting or running
  };
  void Persist(const Entry& b, store::WriteBatch& batch) const;
  static bool Gated(const api::Job& job) { return !job.batch.empty() || !job.spec.depends_on.empty(); }

  Clock* clock_;
  JobState* jobs_;
  Accounts* accounts_;
  std::map<std::string, Entry> batches_;
  // Queued jobs of a batch or with dependencies, by submission order: the
  // ones Gate() looks at.
  std::map<uint64_t, std::string> gated_;
  // Queued jobs the scheduler must not see this pass, with the reason.
  std::unordered_map<std::string, std::string> held_;
};

}  // namespace tide::server
