// Core: the single writer of the server's state.
//
// The core owns jobs, nodes, leases, users and tokens in memory. I/O threads
// call the command methods below; each command is queued to the core thread,
// which applies a whole batch of queued commands, runs the scheduler, writes
// everything the batch changed to the Store in ONE transaction (group
// commit), and only then lets the callers return. So a command that returned
// Ok is durable: "acknowledged means durable".
//
// Reads (Get*, List*) take a shared lock on the in-memory state and never
// wait for the store. Waiters (long-polls, log follows) block on WaitChange.
//
// Thread-safe: every public method may be called from any thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api/batch.h"
#include "api/types.h"
#include "common/clock.h"
#include "common/status.h"
#include "ledger/ledger.h"
#include "ledger/prices.h"
#include "scheduler/fair_share.h"
#include "scheduler/snapshot.h"
#include "store/store.h"

namespace tide::server {

enum class Scope : uint8_t { kAdmin, kUser, kJoin, kNode };

// Who is calling, from the bearer token.
struct Caller {
  Scope scope = Scope::kUser;
  std::string subject;  // user id, node id; "admin" for the admin token
};

// Rank 0 of a gang listens for the others on a port in
// [kMasterPortBase, kMasterPortBase + kMasterPorts) of its node.
inline constexpr int kMasterPortBase = 29500;
inline constexpr int kMasterPorts = 1000;

struct CoreOptions {
  int64_t node_timeout_ms = 10'000;
  // A job whose agent stops reporting it for this long after it started is
  // considered lost by the agent and is requeued.
  int64_t report_grace_ms = 10'000;
  int64_t tick_ms = 250;
  // How often the expected start of queued jobs is re-estimated (a what-if
  // run of the scheduler, off the core thread).
  int64_t estimate_interval_ms = 2'000;
  // What a job without max_runtime and max_cost may cost at most (held in
  // escrow at submit): never unlimited.
  ledger::Micros default_job_cap = 100 * ledger::kMicrosPerCredit;
  // How often running attempts are charged (each up to its node's last
  // heartbeat).
  int64_t meter_interval_ms = 1'000;
};

// --- money views (server/money.cc) ---
struct BalanceInfo {
  ledger::Micros available = 0;
  ledger::Micros escrow = 0;  // held for the caller's jobs that have not ended
};
// One attempt (one rank of a multi-node attempt) as the consumer pays it.
struct UsageLine {
  std::string job_id;
  std::string name;
  int attempt = 0;
  int rank = 0;
  std::string node_id;
  std::string gpu_model;
  int gpus = 0;
  int64_t started_at = 0;
  int64_t finished_at = 0;  // 0 while it runs
  ledger::Micros rate = 0;  // per GPU-hour
  ledger::Micros cost = 0;  // charged so far
};
// What a provider earned from one attempt on one of its nodes.
struct EarningLine {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  std::string node_id;
  int64_t gpu_ms = 0;
  ledger::Micros rate = 0;
  ledger::Micros gross = 0;
  ledger::Micros fee = 0;
  ledger::Micros earned = 0;
};
struct JobMoney {
  ledger::Micros cost = 0;    // charged so far, all attempts
  ledger::Micros escrow = 0;  // still held
};
struct Estimate {
  ledger::Micros rate = 0;  // per GPU-hour
  int gpus = 0;
  double hours = 0;
  ledger::Micros base = 0;
  ledger::Micros reserve = 0;
  ledger::Micros total = 0;
  int64_t expected_start = 0;  // unix ms, 0 = unknown
};

// A batch with what its trials add up to (server/batch.cc).
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

struct UserInfo {
  std::string id;
  std::string name;
  int64_t created_at = 0;
};

// GET /v1/queue: pending and running work by requested GPU type.
struct QueueGroup {
  std::string gpu_type;  // "RTX4090", "A100|H100", or "any"
  int pending_jobs = 0;
  int pending_gpus = 0;
  int running_jobs = 0;
  int running_gpus = 0;
  int64_t expected_wait_ms = -1;  // median over its pending jobs; -1 = unknown
};
struct QueuedJob {
  std::string id;
  std::string name;
  std::string gpu_type;
  int gpus = 0;
  std::string pending_reason;
  int64_t expected_start = 0;  // 0 = unknown
};
struct QueueSummary {
  std::vector<QueueGroup> groups;
  std::vector<QueuedJob> jobs;  // the caller's queued jobs (all for admins), oldest first
  int total_gpus = 0;
  int free_gpus = 0;
  int64_t estimated_at = 0;
};

struct NodeStatus {
  api::Node node;
  std::map<std::string, std::vector<int>> leases;  // job id -> GPU indices
};

class Core {
 public:
  Core(store::Store* store, Clock* clock, CoreOptions options);
  ~Core();

  // Loads the store into memory. Call once before Start().
  Status Recover();
  // Creates the admin token if none exists; returns it ("" if one existed).
  Result<std::string> EnsureAdminToken();
  void Start();
  void Stop();

  // --- auth ---
  Result<Caller> Authenticate(const std::string& bearer_token) const;

  // --- user commands (durable when they return Ok) ---
  // Returns the job and whether it was created now (false: an earlier
  // request with the same idempotency key created it).
  Result<std::pair<api::Job, bool>> SubmitJob(const Caller& caller, api::JobSpec spec,
                                              const std::string& idempotency_key);
  Result<api::Job> CancelJob(const Caller& caller, const std::string& id);

  // --- batches (server/batch.cc) ---
  // Creates every trial of `spec` as a job, in one transaction, with the
  // batch's budget (or its trials' worst case) held in escrow. The bool is
  // false when an earlier request with the same idempotency key made it.
  Result<std::pair<BatchInfo, bool>> SubmitBatch(const Caller& caller, const api::BatchSpec& spec,
                                                 const std::string& idempotency_key);
  Result<BatchInfo> GetBatch(const Caller& caller, const std::string& id) const;
  // Newest first.
  std::vector<BatchInfo> ListBatches(const Caller& caller) const;
  // Cancels every trial that has not ended.
  Result<BatchInfo> CancelBatch(const Caller& caller, const std::string& id);
  // The batch's trials in the order of the file.
  Result<std::vector<api::Job>> BatchTrials(const Caller& caller, const std::string& id) const;

  // --- reads ---
  // NotFound if the job does not exist or the caller may not see it.
  Result<api::Job> GetJob(const Caller& caller, const std::string& id) const;
  // Newest first; `after` is the last id of the previous page.
  std::pair<std::vector<api::Job>, std::string> ListJobs(const Caller& caller,
                                                         const std::string& status,
                                                         const std::string& tag, size_t limit,
                                                         const std::string& after,
                                                         const std::string& batch = "") const;
  std::vector<NodeStatus> ListNodes() const;
  QueueSummary Queue(const Caller& caller) const;

  // --- money (server/money.cc) ---
  // Credits the card's value to the caller, once: returns the value.
  Result<ledger::Micros> Redeem(const Caller& caller, const std::string& code);
  BalanceInfo Balance(const Caller& caller) const;
  std::vector<UsageLine> Usage(const Caller& caller, int64_t since) const;
  // Attempts on nodes the caller owns as a provider.
  std::vector<EarningLine> Earnings(const Caller& caller) const;
  JobMoney MoneyOf(const std::string& job_id) const;
  // Cost of running `spec` for `hours` (or its max_runtime when hours is 0)
  // at the highest rate a node it may run on asks, plus `reserve_ppm`.
  Result<Estimate> EstimateCost(const api::JobSpec& spec, double hours, int64_t reserve_ppm) const;
  // Admin: prints once; only hashes are kept.
  Result<std::vector<std::string>> MintCards(int count, ledger::Micros value, int64_t expires_at);
  Status SetPrices(const ledger::PriceList& prices);
  // What the user's jobs may spend per UTC day, in all; 0 = no cap.
  Status SetDailyCap(const std::string& user_id, ledger::Micros cap);
  ledger::Micros DailyCap(const std::string& user_id) const;
  // The user's fair-share weight (default 1): an account of weight 2 is
  // entitled to twice the GPU-time of one of weight 1 when both wait.
  Status SetWeight(const std::string& user_id, double weight);
  double Weight(const std::string& user_id) const;
  // Operator totals, Prometheus text format (GET /metrics).
  std::string Metrics() const;
  ledger::PriceList Prices() const;
  // Recomputes the ledger and proves it balances.
  Status CheckLedger(ledger::Totals* totals) const;

  // --- admin ---
  Result<std::pair<UserInfo, std::string>> CreateUser(const std::string& name);
  // Agents joining with it belong to `provider` (a user id; "" = the operator).
  Result<std::string> CreateJoinToken(const std::string& provider = "");
  // A user id for a user's id or name; NotFound otherwise.
  Result<std::string> FindUser(const std::string& id_or_name) const;
  // A draining node takes no new jobs. It keeps its running ones, unless
  // `evict`: then they get the notice (node_draining) and are requeued.
  Result<api::Node> SetDraining(const std::string& id_or_name, bool draining, bool evict = false);

  // --- agents ---
  // With a join token: a new node. With a node token: the same node again.
  Result<std::pair<std::string, std::string>> RegisterNode(const Caller& caller,
                                                           const api::RegisterRequest& req);
  Result<api::AgentWork> Heartbeat(const std::string& node_id, const api::Heartbeat& hb);
  // Work not yet handed to this node; waits up to `wait_ms` for some.
  Result<api::AgentWork> PollWork(const std::string& node_id, int64_t wait_ms);
  Status JobEvent(const std::string& node_id, const std::string& job_id, const api::JobEvent& ev);
  // The rank `node_id` runs (or ran, for `attempt`) of `job_id`: 0 for a
  // single-node job; NotFound if it never did. With `current_only`, only
  // the attempt leased to it now counts (kConflict otherwise): what a stale
  // attempt uploads must not replace results.
  Result<int> CheckAgentJob(const std::string& node_id, const std::string& job_id, int attempt,
                       bool current_only = false) const;

  // The agent of `node_id` uploaded a checkpoint of `bytes` for attempt
  // `attempt` of `job_id`: if that attempt is still the node's, `commit`
  // (which puts it in place) runs and the job records it.
  Status RecordCheckpoint(const std::string& node_id, const std::string& job_id, int attempt,
                          int64_t bytes, const std::function<Status()>& commit = nullptr);

  // --- change notification (log appends, state changes) ---
  uint64_t epoch() const;
  void NotifyChange();
  // Waits until epoch() != seen or the deadline passes (monotonic ms).
  void WaitChange(uint64_t seen, int64_t deadline_mono_ms) const;

  // Code archives the caller may reference, checked at submit.
  void set_code_checker(std::function<bool(const std::string& owner, const std::string& id)> f) {
    code_checker_ = std::move(f);
  }

 private:
  struct JobEntry {
    api::Job job;
    uint64_t order = 0;          // submission order, for FIFO
    int64_t status_since_mono = 0;
    int64_t queued_since = 0;    // unix ms it last entered the queue
  };
  struct NodeEntry {
    api::Node node;
    int64_t last_seen_mono = 0;
    std::map<std::string, std::vector<int>> leases;
  };
  // A command runs on the core thread with the state locked exclusively;
  // it adds the rows it changed to `batch`.
  struct Snapshot {
    std::vector<sched::NodeView> views;
    std::vector<sched::PendingJob> queue;
    std::vector<sched::RunningJob> running;
  };
  // With `only`, the queue holds just those jobs.
  void BuildSnapshot(int64_t now, Snapshot& snap,
                     const std::vector<std::string>* only = nullptr) const;
  void EstimateLoop();
  using Command = std::function<Status(store::WriteBatch& batch)>;
  struct Pending {
    Command command;
    Status result;
    bool done = false;
  };

  Status Run(Command command);
  void Loop();
  void Tick(store::WriteBatch& batch);
  void ScheduleLocked(store::WriteBatch& batch);
  void PersistJob(const JobEntry& e, store::WriteBatch& batch) const;
  // A new queued job (a submission, or a trial of a new batch).
  JobEntry& AddJobLocked(api::Job job, store::WriteBatch& batch);
  void PersistNode(const NodeEntry& n, store::WriteBatch& batch) const;
  bool Visible(const Caller& caller, const api::Job& job) const;
  // Ends the current attempt of a leased job and frees its GPUs.
  void ReleaseLocked(JobEntry& e, const std::string& reason, std::optional<int> exit_code);
  // Node gone: its jobs go back to the queue (or end, if being cancelled).
  void RequeueLocked(JobEntry& e, const std::string& reason,
                     std::optional<int> exit_code = std::nullopt);
  void SetStatus(JobEntry& e, api::JobStatus s);

  // Applies `tx` to the ledger and queues its row for the batch being built.
  Status ApplyTxLocked(ledger::Transaction tx);
  // Rate of `node`'s GPU `gpu` for a job of `spec`'s tier.
  ledger::Micros NodeRateLocked(const api::Node& node, int gpu, const api::JobSpec& spec) const;
  // Highest rate of a GPU `spec` may run on (the admission worst case).
  ledger::Micros MaxRateLocked(const api::JobSpec& spec) const;
  // What a job may cost at most: held in escrow while it lives.
  ledger::Micros WorstCaseLocked(const api::JobSpec& spec, ledger::Micros rate) const;
  // Charges each started rank of the current attempt up to `until` (and
  // never past a lost node's last heartbeat).
  void MeterLocked(JobEntry& e, int64_t until);
  // Periodic: meters every running job; stops those out of budget.
  void MeterAllLocked(store::WriteBatch& batch);
  // A job ended: what its escrow still holds returns to its owner.
  void ReleaseEscrowLocked(JobEntry& e);
  void RecoverMoneyLocked(const store::Contents& contents);
  // What `user`'s jobs were charged since UTC midnight of `now`.
  ledger::Micros SpentTodayLocked(const std::string& user, int64_t now) const;
  // Refuses a hold of `hold` that could take `user` past its daily cap.
  Status CheckDailyCapLocked(const std::string& user, ledger::Micros hold) const;
  // Whether an agent has been handed any part of the job's current attempt.
  bool DeliveredLocked(const api::Job& job) const;
  // A free rendezvous port for a gang whose rank 0 runs on `node_id`.
  int MasterPortLocked(const std::string& node_id, const std::string& job_id, int attempt) const;
  // A rank of a gang reported; the job's outcome once its last rank exited.
  std::optional<api::JobEvent> GangEventLocked(JobEntry& e, int rank, const api::JobEvent& ev,
                                               store::WriteBatch& batch);
  // One node's part of a job is gone: requeue it, or for a gang end that
  // rank and stop the others (see core.cc).
  void LostPartLocked(JobEntry& e, const std::string& node_id, const std::string& reason,
                      store::WriteBatch& batch);
  // While a gang is being stopped: its ranks no agent was handed end now.
  void DropUndeliveredRanksLocked(JobEntry& e);
  // A gang attempt's outcome once every rank has exited, else nullopt.
  std::optional<api::JobEvent> GangOutcome(const JobEntry& e) const;
  // The job's process (or its gang's last one) exited with `ev`.
  Status FinishLocked(JobEntry& e, const api::JobEvent& ev, store::WriteBatch& batch);
  // Why the current attempt is being stopped ("cancelled", "preempted"), or "".
  static std::string StopReason(const api::Job& job);
  // Cancels a job that has not ended (reason `reason`): at once if no agent
  // has it, else by a stop order.
  void CancelLocked(JobEntry& e, const std::string& reason, store::WriteBatch& batch);

  // --- batches and dependencies (server/batch.cc) ---
  struct BatchEntry {
    api::Batch batch;
    std::vector<std::string> jobs;  // trial job ids, in file order
    int open = 0;    // trials not ended
    int active = 0;  // trials starting or running
  };
  void PersistBatch(const BatchEntry& b, store::WriteBatch& batch) const;
  BatchInfo BatchInfoLocked(const BatchEntry& b) const;
  // A job changes status from `from` to `to`: the counts of its batch.
  void CountTrialLocked(const api::Job& job, api::JobStatus from, api::JobStatus to);
  // Before a pass: which queued jobs must wait for their batch's
  // max_concurrent or budget, or for their dependencies (held_, with the
  // reason), and which can never start (cancelled now).
  void GateQueueLocked(store::WriteBatch& batch);
  // How a dependency of a queued job stands: 1 met, 0 not yet, -1 never.
  int DependencyStateLocked(const api::JobSpec::Dependency& dep) const;
  Status RecoverBatchesLocked(const store::Contents& contents);

  // --- money (server/money.cc); the caller holds state_mu_ exclusively ---
  // The escrow account a job's charges come from: its own, or its batch's.
  static std::string EscrowOf(const api::Job& job);
  // What the current attempt may still be charged: the escrow's balance,
  // for a trial also bounded by its attempt's cap and its own max_cost.
  ledger::Micros SpendableLocked(const JobEntry& e) const;
  // What one attempt of `spec` at `rate` may cost at most (without retries).
  ledger::Micros AttemptCapLocked(const api::JobSpec& spec, ledger::Micros rate) const;
  // What the running attempt of `e` may still cost, at most.
  ledger::Micros AttemptReserveLocked(const JobEntry& e) const;
  // Charged to the job so far: all attempts, or only `only` (one of them).
  ledger::Micros ChargedLocked(const api::Job& job, const api::Attempt* only = nullptr) const;

  store::Store* store_;
  Clock* clock_;
  CoreOptions options_;
  std::function<bool(const std::string&, const std::string&)> code_checker_;

  mutable std::shared_mutex state_mu_;  // guards everything below up to queue_mu_
  std::unordered_map<std::string, JobEntry> jobs_;
  std::vector<std::string> job_order_;  // all ids, oldest first
  std::map<uint64_t, std::string> queued_;  // order -> id of every queued job
  uint64_t next_order_ = 0;
  std::map<std::string, NodeEntry> nodes_;
  std::map<std::string, UserInfo> users_;        // by id
  std::map<std::string, std::string> user_names_;  // name -> id
  std::unordered_map<std::string, store::TokenRow> tokens_;  // by hash
  std::map<std::pair<std::string, std::string>, std::string> idempotency_;
  // A full pass is needed after anything but plain submissions; those are
  // scheduled incrementally from where the last pass ended.
  bool schedule_needed_ = true;
  bool command_is_submission_ = false;
  std::vector<std::string> submitted_since_pass_;
  sched::SchedulerConfig sched_config_;
  std::set<std::string> claimed_;  // nodes the last full pass held or reserved
  int waiting_after_pass_ = 0;
  bool refine_reasons_ = false;
  int64_t last_full_pass_mono_ = 0;
  int64_t last_meter_mono_ = 0;
  sched::FairShare fair_;
  std::map<std::string, double> weights_;  // fair-share weights set by the admin
  std::map<std::string, BatchEntry> batches_;
  // Queued jobs of a batch or with dependencies, by submission order: the
  // ones GateQueueLocked looks at.
  std::map<uint64_t, std::string> gated_;
  // Queued jobs the scheduler must not see this pass, with the reason.
  std::unordered_map<std::string, std::string> held_;

  // Money. ledger_rows_ are the transactions applied since the last batch
  // was handed to the store; Loop() moves them into that batch.
  ledger::Ledger ledger_;
  std::vector<store::LedgerRow> ledger_rows_;
  ledger::PriceList prices_;
  struct Card {
    ledger::Micros value = 0;
    int64_t expires_at = 0;  // unix ms; 0 = never
    int64_t created_at = 0;
    std::string redeemed_by;
    int64_t redeemed_at = 0;
  };
  std::unordered_map<std::string, Card> cards_;  // by hash
  // Charged so far per "job#attempt#rank": the cost and its fee part.
  struct Charged {
    ledger::Micros gross = 0;
    ledger::Micros fee = 0;
  };
  std::unordered_map<std::string, Charged> charged_;
  std::unordered_map<std::string, ledger::Micros> daily_caps_;  // by user id
  struct DaySpend {
    int64_t day = -1;  // days since the epoch, UTC
    ledger::Micros spent = 0;
  };
  std::unordered_map<std::string, DaySpend> spent_today_;  // by user id

  // Delivery to agents (not durable: after a restart everything in flight
  // is offered again and agents deduplicate).
  mutable std::mutex delivery_mu_;
  // Keys "job#attempt@node": a gang's ranks are delivered one node at a time.
  std::set<std::string> delivered_;         // assignments
  std::set<std::string> cancel_delivered_;  // cancels
  // Placed in the batch being written: not offered before it is durable.
  std::set<std::string> uncommitted_;

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::condition_variable done_cv_;
  std::deque<Pending*> queue_;
  bool stopping_ = false;
  bool started_ = false;
  std::thread thread_;

  std::thread estimator_;
  mutable std::mutex estimate_mu_;
  std::condition_variable estimate_cv_;
  std::unordered_map<std::string, int64_t> estimates_;  // queued job -> expected start
  int64_t estimated_at_ = 0;

  mutable std::mutex notify_mu_;
  mutable std::condition_variable notify_cv_;
  uint64_t epoch_ = 0;
};

}  // namespace tide::server
