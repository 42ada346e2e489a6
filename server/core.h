// Core: the single writer of the server's state, and the door to it.
//
// I/O threads call the command methods below; each command is queued to
// the core thread, which applies a whole batch of queued commands, runs the
// scheduler, writes everything the batch changed to the Store in ONE
// transaction (group commit), and only then lets the callers return. So a
// command that returned Ok is durable: "acknowledged means durable".
//
// The state lives in rooms, each the one owner of its part (server/README.md):
//   JobState     jobs, nodes, leases and every status change
//   PlanApplier  the scheduler's snapshot, passes and their plans
//   Reconciler   registrations, heartbeats, lost nodes, job events
//   Telemetry    GPU readings over time, per node GPU and per job
//   Delivery     what each agent was handed (its own lock; long-polls)
//   Accounts     the ledger: admit, meter, release; cards, prices, caps
//   Batches      sweeps and the gate of max_concurrent, budgets, dependencies
// The core owns users and tokens itself, runs the loop, and wires the
// rooms together (JobState::Listener).
//
// Reads (Get*, List*) take a shared lock on the state and never wait for
// the store. Waiters (long-polls, log follows) block on WaitChange.
//
// Thread-safe: every public method may be called from any thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/batch.h"
#include "api/types.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "ledger/ledger.h"
#include "ledger/prices.h"
#include "server/accounts.h"
#include "server/audit.h"
#include "server/batches.h"
#include "server/delivery.h"
#include "server/job_state.h"
#include "server/plan_applier.h"
#include "server/reconciler.h"
#include "server/telemetry.h"
#include "server/tokens.h"
#include "store/store.h"

namespace tide::server {

enum class Scope : uint8_t { kAdmin, kUser, kJoin, kNode };

// Who is calling, from the bearer token.
struct Caller {
  Caller() = default;
  Caller(Scope s, std::string who) : scope(s), subject(std::move(who)) {}
  Scope scope = Scope::kUser;
  std::string subject;  // user id, node id; "admin" for the admin token
  Access access = Access::kFull;  // of a user token: what its scope allows
  std::string token_id;           // "ut-…": the token that called
  std::string address;            // the caller's IP address; "" if not over the network
  bool session = false;           // a console session (a cookie), not a bearer token
  std::string parent_token;       // a session's: the id of the token it was made from
  std::string token_hash;         // SHA-256 of the secret that called (CredentialValid)
  int64_t expires_at = 0;         // when the token that called ends (unix ms; 0: never)
};

// A console session (docs/security.md, "The console"): its secret goes in
// a cookie; it acts with the scope of what it was made from.
struct SessionInfo {
  std::string secret;     // shown once, in the Set-Cookie
  std::string id;         // "st-…"
  Caller caller;
  std::string user_name;  // "" for the operator
  int64_t expires_at = 0;
};

// A console session lives this long, or less if its token ends sooner.
inline constexpr int64_t kSessionLifeMs = 12LL * 3600 * 1000;
// A one-time login link works once, within this long.
inline constexpr int64_t kLoginCodeLifeMs = 15LL * 60 * 1000;
// Sessions made from one token at most: a new one ends the oldest.
inline constexpr size_t kMaxSessionsPerToken = 16;

// The operator acting through the admin token: what the server's own setup
// and tests act as.
inline Caller AdminCaller() { return Caller{Scope::kAdmin, "admin"}; }

struct CoreOptions {
  int64_t node_timeout_ms = 10'000;
  // A job whose agent stops reporting it for this long after it started is
  // considered lost by the agent and is requeued.
  int64_t report_grace_ms = 10'000;
  int64_t tick_ms = 250;
  // How long a node token lives; agents get a new one in a heartbeat
  // answer once a third of it is left. 0: node tokens never expire.
  int64_t node_token_life_ms = 30LL * 24 * 3'600'000;
  // How often the expected start of queued jobs is re-estimated (a what-if
  // run of the scheduler, off the core thread).
  int64_t estimate_interval_ms = 2'000;
  // What a job without max_runtime and max_cost may cost at most (held in
  // escrow at submit): never unlimited.
  ledger::Micros default_job_cap = 100 * ledger::kMicrosPerCredit;
  // How often running attempts are charged (each up to its node's last
  // heartbeat).
  int64_t meter_interval_ms = 1'000;
  // GPU histories and the idle check (server/telemetry.h).
  TelemetryOptions telemetry;
  // Ended jobs' data (logs, outputs, checkpoints, code) is deleted this
  // long after they end, as `tide rm` does; 0: kept until deleted.
  int64_t retention_ms = 0;
};

// What goes from the blob store once a job's deletion is durable.
struct DeletedBlobs {
  std::string job_id;
  std::string owner;
  std::string code;  // its code archive, if no other job of the owner uses it; "" = none
};

struct Estimate {
  ledger::Micros rate = 0;  // per GPU-hour
  int gpus = 0;
  double hours = 0;
  ledger::Micros base = 0;
  ledger::Micros reserve = 0;
  ledger::Micros total = 0;
  int64_t expected_start = 0;  // unix ms, 0 = unknown
  // Why no node can ever run it as it is (what a submission's
  // pending_reason would say), or "".
  std::string never_starts;
};

struct UserInfo {
  std::string id;
  std::string name;
  int64_t created_at = 0;
};

// GET /v1/admin/users: a user as the scheduler and the ledger see them,
// like Slurm's sshare joined with the account's balance.
struct UserStanding {
  UserInfo user;
  double weight = 1;
  double usage_gpu_s = 0;  // decayed GPU-seconds (scheduler/fair_share.h)
  double share = 0;        // weight over the weights of users with work (0: none)
  double usage_share = 0;  // usage over every user's usage
  int running_jobs = 0;
  int running_gpus = 0;
  int queued_jobs = 0;
  int queued_gpus = 0;
  double score = 0;  // sched::FairShareScore
  // Among users with queued work, by score (1 = lowest): the order in which
  // they are served between jobs of equal tier and service level (the
  // server schedules with the tide policy). 0 with nothing queued.
  int rank = 0;
  ledger::Micros available = 0;
  ledger::Micros escrow = 0;
  ledger::Micros daily_cap = 0;  // 0 = none
};
struct UserStandings {
  std::vector<UserStanding> users;  // by name
  int64_t half_life_ms = 0;
  int64_t at = 0;
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

// GET /v1/jobs: which jobs, and which page of them. Each set matches any
// of its values; an empty one matches all.
struct JobQuery {
  std::set<std::string> statuses;   // "queued", "running", ...
  std::set<std::string> tags;
  std::set<std::string> batches;
  // A GPU model the job asks for or runs on; "any": it asks for none.
  std::set<std::string> gpu_types;
  std::string text;  // in the id or the name, in any case
  size_t limit = 100;
  std::string after;   // the last id of the previous page
  bool count = false;  // count every match (JobPage::total)
};

struct JobPage {
  std::vector<api::Job> jobs;
  std::string next;  // "" on the last page
  size_t total = 0;  // with JobQuery::count
};

struct NodeStatus {
  api::Node node;
  std::map<std::string, std::vector<int>> leases;  // job id -> GPU indices
  double reliability = 1.0;
};

class Core : private JobState::Listener {
 public:
  Core(store::Store* store, Clock* clock, CoreOptions options);
  ~Core() override;

  // Loads the store into memory. Call once before Start().
  Status Recover();
  // Creates the admin token if none exists; returns it ("" if one existed).
  Result<std::string> EnsureAdminToken();
  void Start();
  void Stop();

  // --- auth ---
  // A bearer token or a session's secret (the caller says which it is).
  Result<Caller> Authenticate(const std::string& bearer_token) const;

  // Whether the credential the caller authenticated with still works (not
  // revoked, ended or logged out): what a long stream checks as it goes.
  bool CredentialValid(const Caller& caller) const;

  // --- console sessions (core_sessions.cc) ---
  // Logs in with a user's token or the admin token: a session of that
  // token's scope, ending after kSessionLifeMs, when the token ends, or when
  // it is revoked.
  Result<SessionInfo> CreateSession(const std::string& token, const std::string& address);
  // A one-time login link's code for a user (id or name; "" = the
  // operator), working once within kLoginCodeLifeMs. Admin only.
  Result<std::pair<std::string, int64_t>> CreateLoginCode(const Caller& by,
                                                          const std::string& user);
  // Spends a login code: a session of the user's full scope (or the
  // operator's).
  Result<SessionInfo> RedeemLoginCode(const std::string& code, const std::string& address);
  // Ends the caller's session (a logout).
  Status EndSession(const Caller& caller);
  // The console sessions of the caller's user (the operator's, for the
  // admin) that still work, oldest first; `name` is the token each was
  // made from.
  std::vector<TokenInfo> ListSessions(const Caller& caller) const;
  // Ends one of them by its id ("st-…"); NotFound for any other id. A user
  // needs a full-scope credential, as for tokens.
  Status EndSessionById(const Caller& caller, const std::string& id);
  // The user's name for a caller ("" for the operator).
  std::string UserName(const Caller& caller) const;

  // --- user commands (durable when they return Ok) ---
  // Returns the job and whether it was created now (false: an earlier
  // request with the same idempotency key created it).
  Result<std::pair<api::Job, bool>> SubmitJob(const Caller& caller, api::JobSpec spec,
                                              const std::string& idempotency_key);
  Result<api::Job> CancelJob(const Caller& caller, const std::string& id);

  // --- batches ---
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
  // The GPU telemetry of a job (NotFound as GetJob); without `series`, only
  // the newest readings and the averages.
  Result<api::JobTelemetry> JobTelemetry(const Caller& caller, const std::string& id,
                                         bool series) const;
  // The GPU telemetry of a node (by id or name), for its provider and the
  // operator; NotFound for anyone else.
  Result<api::NodeTelemetry> NodeTelemetry(const Caller& caller, const std::string& id_or_name,
                                           bool series) const;
  // Newest first; `after` is the last id of the previous page.
  JobPage ListJobs(const Caller& caller, const JobQuery& q) const;
  // The jobs the caller may see that were written after change `seq`
  // (JobState::ChangedSince), a thousand changes at most; `*next` is the
  // change to ask after next time. JobChangeSeq: the newest change.
  std::vector<api::Job> JobChangesSince(const Caller& caller, uint64_t seq, uint64_t* next) const;
  uint64_t JobChangeSeq() const;
  std::pair<std::vector<api::Job>, std::string> ListJobs(const Caller& caller,
                                                         const std::string& status,
                                                         const std::string& tag, size_t limit,
                                                         const std::string& after,
                                                         const std::string& batch = "") const;
  std::vector<NodeStatus> ListNodes() const;
  QueueSummary Queue(const Caller& caller) const;
  // What the scheduler would see now (tests compare it with `tide sim`'s).
  SchedulerInput SchedulerSnapshot() const;

  // --- money ---
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
  Result<std::vector<std::string>> MintCards(const Caller& by, int count, ledger::Micros value,
                                             int64_t expires_at);
  Status SetPrices(const Caller& by, const ledger::PriceList& prices);
  // What the user's jobs may spend per UTC day, in all; 0 = no cap.
  Status SetDailyCap(const Caller& by, const std::string& user_id, ledger::Micros cap);
  ledger::Micros DailyCap(const std::string& user_id) const;
  // The user's fair-share weight (default 1): an account of weight 2 is
  // entitled to twice the GPU-time of one of weight 1 when both wait.
  Status SetWeight(const Caller& by, const std::string& user_id, double weight);
  double Weight(const std::string& user_id) const;
  // Operator totals, Prometheus text format (GET /metrics).
  std::string Metrics() const;
  ledger::PriceList Prices() const;
  // Recomputes the ledger and proves it balances.
  Status CheckLedger(ledger::Totals* totals) const;

  // --- admin ---
  // Each admin command records who asked in the audit log (`by`).
  Result<std::pair<UserInfo, std::string>> CreateUser(const Caller& by, const std::string& name);
  // Agents joining with it belong to `provider` (a user id; "" = the
  // operator). It expires at `expires_at` (unix ms; 0 = never).
  Result<std::string> CreateJoinToken(const Caller& by, const std::string& provider = "",
                                      int64_t expires_at = 0);
  std::vector<TokenInfo> ListJoinTokens() const;
  Status RevokeJoinToken(const Caller& by, const std::string& id);
  // Revokes a node's credentials: its token stops working at once, it is
  // lost, and its jobs are requeued (node_revoked).
  Result<api::Node> RevokeNode(const Caller& by, const std::string& id_or_name);
  // Every user's tokens that still work, or those of `user_id`, for the
  // operator (never a secret).
  std::vector<TokenInfo> ListUserTokens(const std::string& user_id) const;
  // Revokes any user's token by its id ("ut-…"): the operator's answer to
  // a leaked one. The next request with it is a 401.
  Status RevokeUserToken(const Caller& by, const std::string& id);
  // The audit log (docs/security.md, "Audit"): entries at or after `since`
  // (unix ms), oldest first; at most `limit`, the newest of them.
  std::vector<AuditEntry> AuditLog(int64_t since, size_t limit) const;

  // --- a user's own tokens (docs/security.md, "Tokens") ---
  // A new token of the caller's user; the secret is returned once.
  Result<std::pair<TokenInfo, std::string>> CreateToken(const Caller& caller,
                                                        const std::string& name,
                                                        const std::string& scope,
                                                        int64_t expires_at);
  std::vector<TokenInfo> ListTokens(const Caller& caller) const;
  Status RevokeToken(const Caller& caller, const std::string& name_or_id);
  // A new token with the same name and scope; the old one keeps working
  // for `grace_ms` (0: revoked now).
  Result<std::pair<TokenInfo, std::string>> RotateToken(const Caller& caller,
                                                        const std::string& name_or_id,
                                                        int64_t grace_ms);
  // A user id for a user's id or name; NotFound otherwise.
  Result<std::string> FindUser(const std::string& id_or_name) const;
  // Every user with their fair-share standing and money, for the operator.
  UserStandings Users() const;
  // A draining node takes no new jobs. It keeps its running ones, unless
  // `evict`: then they get the notice (node_draining) and are requeued.
  Result<api::Node> SetDraining(const Caller& by, const std::string& id_or_name, bool draining,
                                bool evict = false);

  // --- agents ---
  // With a join token: a new node. With a node token: the same node again.
  Result<std::pair<std::string, std::string>> RegisterNode(const Caller& caller,
                                                           const api::RegisterRequest& req);
  Result<api::AgentWork> Heartbeat(const std::string& node_id, const api::Heartbeat& hb);
  // A new node token for the agent of `caller` (a node token) when its own
  // nears its end (CoreOptions::node_token_life_ms); "" when none is due.
  Result<std::string> RenewNodeToken(const Caller& caller);
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

  // Deletes an ended job's logs, outputs, checkpoints and code archive for
  // good, keeping its billing record (api::Job::deleted_at); audited.
  // Conflict if the job has not ended; deleting it again is not an error.
  Result<api::Job> DeleteJob(const Caller& caller, const std::string& id);
  // Called on the core thread once a deletion is durable (before the
  // caller is answered), and by the server at start for every deleted job
  // (a crash may have come between the two): removes the blobs.
  void set_blob_deleter(std::function<void(const std::vector<DeletedBlobs>&)> f) {
    blob_deleter_ = std::move(f);
  }
  std::vector<DeletedBlobs> DeletedJobs() const;

  // Code archives the caller may reference, checked at submit.
  void set_code_checker(std::function<bool(const std::string& owner, const std::string& id)> f) {
    code_checker_ = std::move(f);
  }

 private:
  // A command runs on the core thread with the state locked exclusively;
  // it adds the rows it wrote itself (users, tokens, settings, ...) to
  // `batch`; the rooms' changed rows are added after it.
  using Command = std::function<Status(store::WriteBatch& batch)>;
  struct Pending {
    Command command;
    Status result;
    bool done = false;
  };

  Status Run(Command command);
  void Loop();
  // One command of the loop: runs it and collects what it changed.
  void Apply(Pending& p, store::WriteBatch& batch) TIDE_REQUIRES(state_mu_);
  // Timed work: metering, lost nodes, retention; writes its own rows to `batch`.
  void Tick(store::WriteBatch& batch) TIDE_REQUIRES(state_mu_);
  // Deletes the data of the ended jobs `ids` (each visible to `by`).
  void Delete(const std::vector<std::string>& ids, const Caller& by, store::WriteBatch& batch)
      TIDE_REQUIRES(state_mu_);
  // Ended jobs past the retention period, oldest first, at most `max`.
  std::vector<std::string> PastRetention(int64_t now, size_t max) const
      TIDE_REQUIRES_SHARED(state_mu_);
  void EstimateLoop();
  bool Visible(const Caller& caller, const api::Job& job) const;
  bool MayUseBatch(const Caller& caller, const std::string& batch_id) const
      TIDE_REQUIRES_SHARED(state_mu_);
  // The caller's earlier request with this key made `*id`.
  bool Replayed(const Caller& caller, const std::string& key, std::string* id) const
      TIDE_REQUIRES_SHARED(state_mu_);
  void Remember(const Caller& caller, const std::string& key, const std::string& id,
                store::WriteBatch& batch) TIDE_REQUIRES(state_mu_);

  // JobState::Listener: how the rooms follow a job's changes.
  // JobState calls them inside transitions, which run under the lock.
  void AttemptEnding(JobEntry& e, int64_t now) override TIDE_REQUIRES(state_mu_);
  void AttemptEnded(const JobEntry& e, const api::Attempt& a, int64_t now) override
      TIDE_REQUIRES(state_mu_);
  void StatusChanged(JobEntry& e, api::JobStatus from) override TIDE_REQUIRES(state_mu_);

  // Ends the console sessions made from token `token_id` at `at` (0: now),
  // when it was revoked or rotated.
  void EndSessionsOf(const std::string& token_id, store::WriteBatch& batch, int64_t at)
      TIDE_REQUIRES(state_mu_);

  store::Store* store_;
  Clock* clock_;
  CoreOptions options_;
  std::function<bool(const std::string&, const std::string&)> code_checker_;
  std::function<void(const std::vector<DeletedBlobs>&)> blob_deleter_;

  // The state: every room below and the core's own tables. Exclusive for
  // commands (the core thread), shared for reads.
  mutable SharedMutex state_mu_;
  Delivery delivery_;  // its own mutex, taken after state_mu_
  JobState jobs_ TIDE_GUARDED_BY(state_mu_);
  Accounts accounts_ TIDE_GUARDED_BY(state_mu_);
  Batches batches_ TIDE_GUARDED_BY(state_mu_);
  PlanApplier planner_ TIDE_GUARDED_BY(state_mu_);
  Telemetry telemetry_ TIDE_GUARDED_BY(state_mu_);
  Reconciler reconciler_ TIDE_GUARDED_BY(state_mu_);
  std::map<std::string, UserInfo> users_ TIDE_GUARDED_BY(state_mu_);          // by id
  std::map<std::string, std::string> user_names_ TIDE_GUARDED_BY(state_mu_);  // name -> id
  Tokens tokens_ TIDE_GUARDED_BY(state_mu_);
  Audit audit_ TIDE_GUARDED_BY(state_mu_);
  // Jobs the command being applied changed in ways that free nothing now
  // (NeedFullPassSoon); Apply counts them against what JobState flushed.
  size_t quiet_changes_ TIDE_GUARDED_BY(state_mu_) = 0;
  std::map<std::pair<std::string, std::string>, std::string> idempotency_ TIDE_GUARDED_BY(state_mu_);
  int64_t last_meter_mono_ TIDE_GUARDED_BY(state_mu_) = 0;
  int64_t last_retention_mono_ TIDE_GUARDED_BY(state_mu_) = 0;
  int64_t last_session_sweep_mono_ TIDE_GUARDED_BY(state_mu_) = 0;
  // Deletions applied since the last write, for blob_deleter_ after it.
  std::vector<DeletedBlobs> deleted_ TIDE_GUARDED_BY(state_mu_);

  // The command queue between I/O threads and the core thread.
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::condition_variable done_cv_;
  std::deque<Pending*> queue_;
  bool stopping_ = false;
  bool started_ = false;
  std::thread thread_;

  // Expected starts of queued jobs, from the estimator thread.
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
