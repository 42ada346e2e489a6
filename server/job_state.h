// JobState: the server's job, node and lease tables, and every change of a
// job's status: the job state machine in one place (server/README.md draws
// it).
//
//   queued ──place──▶ starting ──running──▶ running ──exit 0──▶ completed
//     ▲  │               │                     │ ├──failure──▶ failed
//     │  └──cancel──▶ cancelled ◀──cancel──────┘ │   (or retried: queued)
//     └──────requeue (preempted, node lost, agent shutdown, drained)──┘
//
// Each transition changes the job (and the leases of its nodes) and marks
// what it changed; Flush() writes every changed row into the batch of the
// group commit, so nothing is persisted anywhere else. What other rooms do
// when a job moves (its batch's counts, its escrow, charging its last
// seconds, fair-share usage) is the Listener's, wired by the core.
//
// Not thread-safe on its own: the core's state lock guards it (exclusive
// for transitions, shared for reads).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/types.h"
#include "common/clock.h"
#include "scheduler/snapshot.h"
#include "server/delivery.h"
#include "store/store.h"

namespace tide::server {

struct JobEntry {
  api::Job job;
  uint64_t order = 0;            // submission order, for FIFO
  int64_t status_since_mono = 0;
  int64_t queued_since = 0;      // unix ms it last entered the queue
};

// A node's history, for its reliability: placements that ended there and
// those that ended because of the node (lost, lost by its agent, failed to
// start).
struct NodeHistory {
  int64_t ended = 0;
  int64_t bad = 0;
};

struct NodeEntry {
  api::Node node;
  int64_t last_seen_mono = 0;
  std::map<std::string, std::vector<int>> leases;  // job id -> GPU indices
  NodeHistory history;
};

// --- views of a job's attempts ---

// The attempt a leased job is on, or nullptr.
const api::Attempt* CurrentAttempt(const api::Job& job);
// The node and GPUs of each rank of the current attempt (one for a
// single-node job); with `live`, only ranks that have not exited.
std::vector<std::pair<std::string, std::vector<int>>> Allocs(const api::Job& job, bool live);
// The rank `node_id` runs in the current attempt, or -1.
int RankOn(const api::Job& job, const std::string& node_id);
// The rank `node_id` ran in `attempt` of the job, or -1.
int RankIn(const api::Job& job, int attempt, const std::string& node_id);
// What the scheduler sees of a spec (its shape; no id, account or times).
sched::PendingJob PendingOfSpec(const api::JobSpec& spec);
// Why the current attempt is being stopped ("cancelled", "preempted"), or "".
std::string StopReason(const api::Job& job);
// A failure of the job itself, which its retry policy may run again.
bool IsOwnFailure(const std::string& reason);
// The reason a placement ended is the node's fault (its reliability).
bool IsNodeFault(const std::string& reason);

class JobState {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    // The current attempt of `e` is about to end at `now`.
    virtual void AttemptEnding(JobEntry& e, int64_t now) = 0;
    // Attempt `a` of `e` ended at `now`.
    virtual void AttemptEnded(const JobEntry& e, const api::Attempt& a, int64_t now) = 0;
    // `e` moved from status `from` to its current one.
    virtual void StatusChanged(JobEntry& e, api::JobStatus from) = 0;
  };

  JobState(Clock* clock, Delivery* delivery) : clock_(clock), delivery_(delivery) {}
  void set_listener(Listener* l) { listener_ = l; }

  // --- loading ---
  // Reads the job and node rows back. Nothing else moves: call Repair()
  // once the other rooms are loaded too.
  Status Load(const store::Contents& contents);
  // Attempts leased on nodes the store does not hold cannot be honoured:
  // they end (node_lost) and their jobs are requeued.
  void Repair();

  // --- tables ---
  JobEntry* Find(const std::string& id);
  const JobEntry* Find(const std::string& id) const;
  JobEntry& At(const std::string& id) { return jobs_.at(id); }
  const JobEntry& At(const std::string& id) const { return jobs_.at(id); }
  bool Has(const std::string& id) const { return jobs_.count(id) > 0; }
  size_t size() const { return jobs_.size(); }
  const std::unordered_map<std::string, JobEntry>& jobs() const { return jobs_; }
  const std::vector<std::string>& order() const { return order_; }  // oldest first
  const std::map<uint64_t, std::string>& queued() const { return queued_; }
  std::map<std::string, NodeEntry>& nodes() { return nodes_; }
  const std::map<std::string, NodeEntry>& nodes() const { return nodes_; }
  NodeEntry* FindNode(const std::string& id);
  const NodeEntry* FindNode(const std::string& id) const;

  // --- changes ---
  // Every Flush numbers the jobs it writes: the number of the newest write,
  // and the jobs written after `seq` (each once, oldest write first, at
  // most `max`), with the number of the last one given. What the console's
  // live view follows (GET /v1/events).
  uint64_t change_seq() const { return change_seq_; }
  std::vector<std::string> ChangedSince(uint64_t seq, size_t max, uint64_t* last) const;
  void Touch(const JobEntry& e) { dirty_jobs_.insert(e.job.id); }
  void TouchNode(const NodeEntry& n) { dirty_nodes_.insert(n.node.id); }
  struct Flushed {
    size_t added = 0;    // new jobs
    size_t changed = 0;  // jobs and nodes that existed before
  };
  // Writes every job and node changed since the last Flush into `batch`.
  // `added` lists the new jobs among them. A new job's secrets go to their
  // own row; once the job has ended, the row is deleted and the values
  // forgotten (the names stay).
  Flushed Flush(store::WriteBatch& batch, std::vector<std::string>* added = nullptr);

  // --- transitions ---
  // A new queued job.
  JobEntry& Add(api::Job job);
  // The single place a status changes.
  void SetStatus(JobEntry& e, api::JobStatus s);
  // Leases `attempt` (its node and GPUs, or its ranks) to a queued job.
  void Place(JobEntry& e, api::Attempt attempt);
  // A single-node attempt, or rank `rank` of a gang, reported running.
  void Started(JobEntry& e, int rank);
  // Ends the current attempt of a leased job and frees its GPUs.
  void EndAttempt(JobEntry& e, const std::string& reason, std::optional<int> exit_code);
  // The attempt ended but the job must run again: back to the queue with
  // attempt+1 (or cancelled, if a cancel was asked for).
  void Requeue(JobEntry& e, const std::string& reason, std::optional<int> exit_code = std::nullopt);
  // The job's process (or its gang's last one) exited with `ev`: it ends,
  // is retried, or returns to the queue.
  void Finish(JobEntry& e, const api::JobEvent& ev);
  // Cancels a job that has not ended: at once if no agent has it, else by
  // a stop order.
  void Cancel(JobEntry& e, const std::string& reason);
  // Stops the running attempt for higher-ranked work (the notice), or
  // requeues it at once if no agent has it yet.
  void Preempt(JobEntry& e);
  // The attempt must end but the job must run again elsewhere (a drained
  // node with eviction).
  void Evict(JobEntry& e, const std::string& reason);
  // Rank `rank` of a gang exited with `ev`: its GPUs are free. Returns the
  // outcome of the whole job once its last rank has exited.
  std::optional<api::JobEvent> RankExited(JobEntry& e, int rank, const api::JobEvent& ev);
  // One node's part of a job is gone (node lost, agent lost it or
  // stopped). A single-node job returns to the queue. In a gang only that
  // rank ends: the others get the notice with `reason`, and the job returns
  // to the queue, or ends as it was already ending, once all stopped.
  void LosePart(JobEntry& e, const std::string& node_id, const std::string& reason);
  // The server holds a new checkpoint of the job's `attempt`.
  void Checkpointed(JobEntry& e, int attempt, int64_t bytes);
  // An ended job's data is deleted at `now`: its record keeps only what
  // billing needs (api::DeletedSpec), and its checkpoint is forgotten.
  void Delete(JobEntry& e, int64_t now);

  // Whether an agent has been handed any part of the job's current attempt.
  bool Delivered(const api::Job& job) const;

 private:
  // While a gang is being stopped: its ranks no agent was handed end now.
  void DropUndeliveredRanks(JobEntry& e);
  // A gang attempt's outcome once every rank has exited, else nullopt.
  std::optional<api::JobEvent> GangOutcome(const JobEntry& e) const;
  // If the gang's last rank has stopped, finish it.
  void FinishGangIfDone(JobEntry& e);
  void FreeRank(JobEntry& e, api::Rank& r);
  void NoteNodeOutcome(const std::string& node_id, const std::string& reason);

  Clock* clock_;
  Delivery* delivery_;
  Listener* listener_ = nullptr;
  std::unordered_map<std::string, JobEntry> jobs_;
  std::vector<std::string> order_;
  std::map<uint64_t, std::string> queued_;  // order -> id of every queued job
  uint64_t next_order_ = 0;
  std::map<std::string, NodeEntry> nodes_;
  std::set<std::string> dirty_jobs_;
  std::set<std::string> dirty_nodes_;
  std::set<std::string> added_;
  std::vector<std::string> forget_secrets_;  // rows of ended jobs found at Load
  // The newest write of each job, numbered in order (ChangedSince).
  uint64_t change_seq_ = 0;
  std::map<uint64_t, std::string> changes_;               // seq -> job id
  std::unordered_map<std::string, uint64_t> change_of_;  // job id -> its seq
};

}  // namespace tide::server
