#include "server/core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <tuple>

#include "common/token.h"
#include "scheduler/estimate.h"
#include "scheduler/schedule.h"

namespace tide::server {

using api::Job;
using api::JobStatus;
using ledger::Micros;

namespace {
using api::AttemptGpuSeconds;

// The attempt a leased job is on, or nullptr.
const api::Attempt* Current(const Job& job) {
  if (job.attempts.empty()) return nullptr;
  const api::Attempt& a = job.attempts.back();
  return a.attempt == job.attempt && a.finished_at == 0 ? &a : nullptr;
}

// The node and GPUs of each rank of the current attempt (one for a
// single-node job); with `live`, only ranks that have not exited.
std::vector<std::pair<std::string, std::vector<int>>> Allocs(const Job& job, bool live) {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  const api::Attempt* a = Current(job);
  if (a != nullptr && !a->ranks.empty()) {
    for (const auto& r : a->ranks) {
      if (!live || r.finished_at == 0) out.emplace_back(r.node_id, r.gpus);
    }
  } else if (!job.node_id.empty()) {
    out.emplace_back(job.node_id, job.gpus);
  }
  return out;
}

// The rank `node_id` runs in the current attempt, or -1.
int RankOn(const Job& job, const std::string& node_id) {
  const api::Attempt* a = Current(job);
  if (a != nullptr && !a->ranks.empty()) {
    for (size_t i = 0; i < a->ranks.size(); ++i) {
      if (a->ranks[i].node_id == node_id) return static_cast<int>(i);
    }
    return -1;
  }
  return job.node_id == node_id && !node_id.empty() ? 0 : -1;
}

// The rank `node_id` ran in `attempt` of the job, or -1.
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

std::string DeliveryKey(const std::string& job_id, int attempt, const std::string& node_id) {
  return job_id + "#" + std::to_string(attempt) + "@" + node_id;
}

// A failure of the job itself, which its retry policy may run again: not a
// stop the server or the user asked for, nor one the node caused.
bool IsOwnFailure(const std::string& reason) {
  return reason.rfind("exit_code:", 0) == 0 || reason.rfind("signal:", 0) == 0 || reason == "oom";
}

uint32_t Fnv(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}
}  // namespace

Core::Core(store::Store* store, Clock* clock, CoreOptions options)
    : store_(store), clock_(clock), options_(options) {}

Core::~Core() { Stop(); }

// ------------------------------------------------------------------ startup

Status Core::Recover() {
  auto contents = store_->LoadAll();
  if (!contents.ok()) return contents.status().WithContext("load store");
  std::unique_lock lock(state_mu_);
  int64_t now_mono = clock_->MonotonicMs();
  for (auto& row : contents->users) {
    users_[row.id] = UserInfo{row.id, row.name, row.created_at};
    user_names_[row.name] = row.id;
  }
  for (auto& row : contents->tokens) tokens_[row.hash] = row;
  for (auto& row : contents->idempotency) idempotency_[{row.owner, row.key}] = row.job_id;
  for (auto& row : contents->nodes) {
    auto node = api::NodeFromJson(nlohmann::json::parse(row.doc, nullptr, false));
    if (!node.ok()) return node.status().WithContext("node " + row.id);
    NodeEntry& n = nodes_[row.id];
    n.node = std::move(node).value();
    // Give every node a full timeout to heartbeat again after our restart.
    n.last_seen_mono = now_mono;
  }
  for (auto& row : contents->jobs) {
    auto job = api::JobFromJson(nlohmann::json::parse(row.doc, nullptr, false));
    if (!job.ok()) return job.status().WithContext("job " + row.id);
    JobEntry& e = jobs_[row.id];
    e.job = std::move(job).value();
    e.order = next_order_++;
    e.status_since_mono = now_mono;
    job_order_.push_back(row.id);
    if (e.job.status == JobStatus::kQueued) queued_[e.order] = e.job.id;
    if (e.job.status == JobStatus::kStarting || e.job.status == JobStatus::kRunning) {
      auto allocs = Allocs(e.job, /*live=*/false);
      bool known = !allocs.empty();
      for (auto& [node, gpus] : allocs) known = known && nodes_.count(node) > 0;
      if (known) {
        for (auto& [node, gpus] : Allocs(e.job, /*live=*/true)) nodes_[node].leases[e.job.id] = gpus;
      } else {
        // A lease on a node we do not know cannot be honoured: the attempt
        // ends here and the job waits for its next one.
        int64_t now = clock_->NowMs();
        if (!e.job.attempts.empty() && e.job.attempts.back().finished_at == 0) {
          auto& a = e.job.attempts.back();
          a.finished_at = now;
          a.reason = "node_lost";
          for (auto& r : a.ranks) {
            if (r.finished_at == 0) r.finished_at = now;
          }
        }
        e.job.status = JobStatus::kQueued;
        e.job.reason = "node_lost";
        e.job.attempt += 1;
        e.job.preempt_requested = false;
        e.job.gang_failure.clear();
        queued_[e.order] = e.job.id;
        e.job.node_id.clear();
        e.job.gpus.clear();
        e.job.started_at = 0;
      }
    }
  }
  TIDE_RETURN_IF_ERROR(RecoverBatchesLocked(*contents));
  RecoverMoneyLocked(*contents);
  for (const auto& row : contents->settings) {
    if (row.key.rfind("weight:", 0) != 0) continue;
    double w = std::strtod(row.value.c_str(), nullptr);
    if (w > 0) {
      fair_.SetWeight(row.key.substr(7), w);
      weights_[row.key.substr(7)] = w;
    }
  }
  // Fair-share usage is derived from the attempts, charged in time order.
  std::vector<std::tuple<int64_t, std::string, double>> used;
  for (auto& [id, e] : jobs_) {
    // Back in the queue since its last attempt ended, or since it was submitted.
    e.queued_since = e.job.created_at;
    if (!e.job.attempts.empty()) e.queued_since = std::max(e.queued_since, e.job.attempts.back().finished_at);
    for (const auto& a : e.job.attempts) {
      if (a.finished_at > 0) used.emplace_back(a.finished_at, e.job.owner, AttemptGpuSeconds(a, 0));
    }
  }
  std::sort(used.begin(), used.end());
  for (auto& [at, owner, gpu_s] : used) fair_.Charge(owner, gpu_s, at);
  spdlog::info("recovered {} jobs, {} nodes, {} users from the store", jobs_.size(), nodes_.size(),
               users_.size());
  return Status::Ok();
}

Result<std::string> Core::EnsureAdminToken() {
  std::string token;
  Status st = Run([&](store::WriteBatch& batch) {
    for (auto& [hash, row] : tokens_) {
      if (row.kind == "admin") return Status::Ok();
    }
    token = NewToken("tide_a_");
    store::TokenRow row{Sha256Hex(token), "admin", "admin", clock_->NowMs()};
    tokens_[row.hash] = row;
    batch.tokens.push_back(row);
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
    Snapshot snap;
    std::map<std::string, sched::AccountShare> shares;
    int64_t now = clock_->NowMs();
    {
      std::shared_lock lock(state_mu_);
      if (queued_.empty()) continue;
      BuildSnapshot(now, snap);
      shares = fair_.Shares(now);
    }
    auto starts = sched::ExpectedStarts({snap.views, snap.queue, snap.running, shares, sched_config_, now});
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
      Status st;
      {
        std::unique_lock state(state_mu_);
        st = p.command(batch);
        batch.ledger = std::move(ledger_rows_);
        ledger_rows_.clear();
      }
      if (st.ok() && !batch.empty()) st = store_->Write(batch);
      return st;
    }
    return Status::Unavailable("server is shutting down");
  }
  queue_.push_back(&p);
  queue_cv_.notify_one();
  done_cv_.wait(lock, [&] { return p.done; });
  return p.result;
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
    {
      std::unique_lock state(state_mu_);
      for (Pending* p : work) {
        store::WriteBatch own;
        command_is_submission_ = false;
        p->result = p->command(own);
        if (p->result.ok() && !own.empty()) {
          batch.Append(std::move(own));
          if (!command_is_submission_) schedule_needed_ = true;
        }
      }
      if (clock_->MonotonicMs() >= next_tick) {
        Tick(batch);
        next_tick = clock_->MonotonicMs() + options_.tick_ms;
      }
      if (schedule_needed_ || !submitted_since_pass_.empty()) ScheduleLocked(batch);
      // The money moved by this batch is written with it.
      for (auto& row : ledger_rows_) batch.ledger.push_back(std::move(row));
      ledger_rows_.clear();
      changed = !batch.empty();
    }
    if (changed) {
      Status st = store_->Write(batch);
      if (!st.ok()) {
        spdlog::critical("store write failed, exiting so recovery can reload: {}", st.ToString());
        std::_Exit(70);
      }
      // Placements of this batch are durable now: agents may get them.
      std::lock_guard<std::mutex> lock(delivery_mu_);
      uncommitted_.clear();
    }
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      for (Pending* p : work) p->done = true;
    }
    done_cv_.notify_all();
    if (changed || !work.empty()) NotifyChange();
  }
}

void Core::PersistJob(const JobEntry& e, store::WriteBatch& batch) const {
  batch.jobs.push_back({e.job.id, e.job.owner, api::JobStatusName(e.job.status), e.job.created_at,
                        api::ToJson(e.job).dump()});
}

void Core::PersistNode(const NodeEntry& n, store::WriteBatch& batch) const {
  api::Node copy = n.node;
  for (auto& g : copy.gpus) {  // telemetry is not worth a write
    g.utilization_pct = -1;
    g.memory_used_mb = -1;
    g.temperature_c = -1;
  }
  batch.nodes.push_back({n.node.id, n.node.name, api::ToJson(copy).dump()});
}

std::string Core::StopReason(const Job& job) {
  if (job.cancel_requested) return job.cancel_reason;
  if (job.preempt_requested) return "preempted";
  if (!job.gang_failure.empty()) return "gang_failed";
  if (!job.requeue_reason.empty()) return job.requeue_reason;
  return "";
}

void Core::SetStatus(JobEntry& e, JobStatus s) {
  const bool gated = !e.job.batch.empty() || !e.job.spec.depends_on.empty();
  if (s == JobStatus::kQueued) {
    queued_[e.order] = e.job.id;
    if (gated) gated_[e.order] = e.job.id;
  } else {
    queued_.erase(e.order);
    gated_.erase(e.order);
    held_.erase(e.job.id);
  }
  CountTrialLocked(e.job, e.job.status, s);
  e.job.status = s;
  e.status_since_mono = clock_->MonotonicMs();
  if (api::IsTerminal(s)) ReleaseEscrowLocked(e);
}

// ------------------------------------------------------------------ periodic

void Core::Tick(store::WriteBatch& batch) {
  int64_t now_mono = clock_->MonotonicMs();
  // Waiting work is re-ranked now and then even when nothing happens:
  // service levels, fair-share usage and starvation change with time.
  if (refine_reasons_ || (!queued_.empty() && now_mono - last_full_pass_mono_ >= 5'000)) {
    schedule_needed_ = true;
    refine_reasons_ = false;
  }
  if (now_mono - last_meter_mono_ >= options_.meter_interval_ms) {
    last_meter_mono_ = now_mono;
    MeterAllLocked(batch);
  }
  for (auto& [id, n] : nodes_) {
    if (n.node.state != api::NodeState::kReady) continue;
    if (now_mono - n.last_seen_mono < options_.node_timeout_ms) continue;
    spdlog::warn("node {} ({}) lost: no heartbeat for {} ms; requeueing {} jobs", n.node.name, id,
                 now_mono - n.last_seen_mono, n.leases.size());
    n.node.state = api::NodeState::kLost;
    PersistNode(n, batch);
    std::vector<std::string> leased;
    for (auto& [job_id, gpus] : n.leases) leased.push_back(job_id);
    for (auto& job_id : leased) {
      auto it = jobs_.find(job_id);
      if (it == jobs_.end()) continue;
      LostPartLocked(it->second, id, "node_lost", batch);
      PersistJob(it->second, batch);
    }
    schedule_needed_ = true;
  }
}

void Core::ReleaseLocked(JobEntry& e, const std::string& reason, std::optional<int> exit_code) {
  int64_t now = clock_->NowMs();
  auto allocs = Allocs(e.job, /*live=*/false);
  MeterLocked(e, now);  // the last seconds of the attempt
  if (!e.job.attempts.empty() && e.job.attempts.back().attempt == e.job.attempt &&
      e.job.attempts.back().finished_at == 0) {
    auto& a = e.job.attempts.back();
    for (auto& r : a.ranks) {
      if (r.finished_at > 0) continue;
      r.finished_at = now;
      r.reason = reason;
    }
    a.finished_at = now;
    a.reason = reason;
    a.exit_code = exit_code;
    fair_.Charge(e.job.owner, AttemptGpuSeconds(a, now), now);
  }
  std::lock_guard<std::mutex> lock(delivery_mu_);
  for (auto& [node_id, gpus] : allocs) {
    auto n = nodes_.find(node_id);
    if (n != nodes_.end()) n->second.leases.erase(e.job.id);
    delivered_.erase(DeliveryKey(e.job.id, e.job.attempt, node_id));
    cancel_delivered_.erase(DeliveryKey(e.job.id, e.job.attempt, node_id));
  }
  uncommitted_.erase(e.job.id);
}

bool Core::DeliveredLocked(const Job& job) const {
  // What runs was delivered, even if the record of it went with a restart.
  if (job.status == JobStatus::kRunning) return true;
  if (const api::Attempt* a = Current(job)) {
    for (const auto& r : a->ranks) {
      if (r.started_at > 0) return true;
    }
  }
  std::lock_guard<std::mutex> lock(delivery_mu_);
  for (auto& [node_id, gpus] : Allocs(job, /*live=*/false)) {
    if (delivered_.count(DeliveryKey(job.id, job.attempt, node_id))) return true;
  }
  return false;
}

void Core::RequeueLocked(JobEntry& e, const std::string& reason, std::optional<int> exit_code) {
  ReleaseLocked(e, reason, exit_code);
  if (e.job.cancel_requested) {
    SetStatus(e, JobStatus::kCancelled);
    e.job.reason = e.job.cancel_reason;
    e.job.finished_at = clock_->NowMs();
    return;
  }
  SetStatus(e, JobStatus::kQueued);
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
  schedule_needed_ = true;
}

// What the scheduler sees, from the in-memory state (the caller holds
// state_mu_, shared or exclusive).
void Core::BuildSnapshot(int64_t now, Snapshot& snap, const std::vector<std::string>* only) const {
  auto tier = [](const api::JobSpec& spec) {
    return spec.tier == "spot" ? sched::Tier::kSpot : sched::Tier::kOnDemand;
  };
  // GPU-seconds of the attempts a job has had: its attained service.
  auto attained = [](const Job& job, int64_t now) {
    double s = 0;
    for (const auto& a : job.attempts) s += AttemptGpuSeconds(a, now);
    return static_cast<int64_t>(s);
  };
  std::unordered_map<std::string, size_t> running_at;  // job -> index in snap.running
  for (auto& [id, n] : nodes_) {
    sched::NodeView v;
    v.id = id;
    v.name = n.node.name;
    v.schedulable = n.node.state == api::NodeState::kReady;
    v.draining = n.node.draining;
    v.labels = n.node.labels;
    v.images = n.node.images;
    static const api::JobSpec kOnDemand;
    for (const auto& g : n.node.gpus) v.price = std::max(v.price, NodeRateLocked(n.node, g.index, kOnDemand));
    std::set<int> used;
    for (auto& [job, gpus] : n.leases) used.insert(gpus.begin(), gpus.end());
    for (auto& g : n.node.gpus) {
      v.gpus.push_back({g.index, g.model, g.memory_mb, used.count(g.index) == 0});
    }
    snap.views.push_back(std::move(v));
    for (auto& [job_id, gpus] : n.leases) {
      auto [at, fresh] = running_at.try_emplace(job_id, snap.running.size());
      if (!fresh) {  // another node of a gang
        snap.running[at->second].allocs.push_back({id, gpus});
        continue;
      }
      const JobEntry& e = jobs_.at(job_id);
      sched::RunningJob r;
      r.id = job_id;
      r.account = e.job.owner;
      r.tier = tier(e.job.spec);
      r.priority = e.job.spec.priority;
      r.allocs = {{id, gpus}};
      r.started_at = e.job.started_at;
      if (e.job.spec.max_runtime_s > 0) {  // a starting job's clock starts about now
        r.expected_end = (e.job.started_at > 0 ? e.job.started_at : now) +
                         e.job.spec.max_runtime_s * 1000;
      }
      r.attained_gpu_s = attained(e.job, now);
      r.stopping = !StopReason(e.job).empty();
      snap.running.push_back(std::move(r));
    }
  }
  std::vector<const JobEntry*> queued;
  if (only) {
    for (const auto& id : *only) {
      const JobEntry& e = jobs_.at(id);
      if (e.job.status == JobStatus::kQueued && !held_.count(id)) queued.push_back(&e);
    }
  } else {
    queued.reserve(queued_.size());
    for (auto& [order, id] : queued_) {
      if (!held_.count(id)) queued.push_back(&jobs_.at(id));
    }
  }
  snap.queue.reserve(queued.size());
  for (const JobEntry* entry : queued) {
    const JobEntry& e = *entry;
    const auto& spec = e.job.spec;
    const auto& r = spec.resources;
    sched::PendingJob p;
    p.id = e.job.id;
    p.account = e.job.owner;
    p.tier = tier(spec);
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
    p.submitted_at = static_cast<int64_t>(e.order);
    p.queued_since = e.queued_since;
    p.attained_gpu_s = attained(e.job, now);
    if (!e.job.attempts.empty() && e.job.attempts.back().started_at > 0) {
      p.last_run_ms = e.job.attempts.back().finished_at - e.job.attempts.back().started_at;
    }
    snap.queue.push_back(std::move(p));
  }
}

// A full pass ranks the whole queue. After a batch of nothing but new
// submissions, a pass over just the new jobs is enough to place them: every
// older job still waits for nodes the last full pass claimed for it (held
// or reserved), and those count as full here, so no new job can take what
// an older one waits for. Reasons of new jobs that must wait are refined by
// the next full pass, at the next tick.
void Core::ScheduleLocked(store::WriteBatch& batch) {
  bool full = schedule_needed_;
  schedule_needed_ = false;
  std::vector<std::string> fresh = std::move(submitted_since_pass_);
  submitted_since_pass_.clear();
  if (queued_.empty()) {
    claimed_.clear();
    waiting_after_pass_ = 0;
    return;
  }
  GateQueueLocked(batch);
  int64_t now = clock_->NowMs();
  Snapshot snap;
  sched::Plan plan;
  while (true) {
    snap = Snapshot{};
    BuildSnapshot(now, snap, full ? nullptr : &fresh);
    if (!full) {
      for (auto& v : snap.views) {
        if (!claimed_.count(v.id)) continue;
        for (auto& g : v.gpus) g.free = false;
      }
    }
    plan = sched::Schedule(
        {snap.views, snap.queue, snap.running, fair_.Shares(now), sched_config_, now});
    // Stopping work cannot be undone: only a full pass, which sees what the
    // claimed nodes really have free, may decide it.
    if (!full && !plan.preemptions.empty()) {
      full = true;
      continue;
    }
    break;
  }
  const std::vector<sched::PendingJob>& queue = snap.queue;
  if (full) {
    last_full_pass_mono_ = clock_->MonotonicMs();
    claimed_ = std::set<std::string>(plan.claimed.begin(), plan.claimed.end());
    waiting_after_pass_ = static_cast<int>(plan.pending.size());
  } else {
    claimed_.insert(plan.claimed.begin(), plan.claimed.end());
    if (!plan.pending.empty()) refine_reasons_ = true;
  }

  // Preemptions: the victim gets the notice (SIGTERM, notice file, grace)
  // and returns to the queue when its agent reports the exit.
  for (const auto& pre : plan.preemptions) {
    auto je = jobs_.find(pre.victim_id);
    if (je == jobs_.end()) continue;
    JobEntry& e = je->second;
    if (api::IsTerminal(e.job.status) || e.job.status == JobStatus::kQueued ||
        !StopReason(e.job).empty()) {
      continue;
    }
    bool delivered = DeliveredLocked(e.job);
    spdlog::info("preempting {} (attempt {}) for {}", e.job.id, e.job.attempt, pre.for_job_id);
    if (e.job.status == JobStatus::kStarting && !delivered) {
      RequeueLocked(e, "preempted");  // no agent has it yet
    } else {
      e.job.preempt_requested = true;
      DropUndeliveredRanksLocked(e);
      if (auto outcome = GangOutcome(e)) (void)FinishLocked(e, *outcome, batch);
    }
    PersistJob(e, batch);
    schedule_needed_ = true;
  }

  // The plan was made from the state we hold the lock on, but re-check each
  // placement anyway: a plan is only ever applied if it is still valid.
  for (const auto& p : plan.placements) {
    auto je = jobs_.find(p.job_id);
    if (je == jobs_.end() || je->second.job.status != JobStatus::kQueued) continue;
    JobEntry& e = je->second;
    const api::Resources& res = e.job.spec.resources;
    bool ok = static_cast<int>(p.allocs.size()) == res.nodes;
    std::set<std::string> seen;
    for (const auto& alloc : p.allocs) {
      auto ne = nodes_.find(alloc.node_id);
      ok = ok && ne != nodes_.end() && ne->second.node.state == api::NodeState::kReady &&
           seen.insert(alloc.node_id).second &&
           static_cast<int>(alloc.gpus.size()) == res.gpu_count;
      if (!ok) break;
      std::set<int> used;
      for (auto& [job, g] : ne->second.leases) used.insert(g.begin(), g.end());
      for (int g : alloc.gpus) ok = ok && used.count(g) == 0;
    }
    if (!ok) {
      spdlog::warn("dropping stale placement of {}", p.job_id);
      schedule_needed_ = true;
      continue;
    }
    for (const auto& alloc : p.allocs) nodes_[alloc.node_id].leases[e.job.id] = alloc.gpus;
    {
      std::lock_guard<std::mutex> lock(delivery_mu_);
      uncommitted_.insert(e.job.id);
    }
    SetStatus(e, JobStatus::kStarting);
    e.job.node_id = p.allocs[0].node_id;
    e.job.gpus = p.allocs[0].gpus;
    e.job.pending_reason.clear();
    api::Attempt a;
    a.attempt = e.job.attempt;
    a.node_id = e.job.node_id;
    a.gpus = e.job.gpus;
    // The price is fixed when the attempt is placed.
    auto rate_on = [&](const sched::NodeAlloc& alloc) {
      return NodeRateLocked(nodes_.at(alloc.node_id).node, alloc.gpus.front(), e.job.spec);
    };
    a.rate = rate_on(p.allocs[0]);
    if (res.nodes > 1) {
      for (const auto& alloc : p.allocs) {
        api::Rank r;
        r.node_id = alloc.node_id;
        r.gpus = alloc.gpus;
        r.rate = rate_on(alloc);
        a.ranks.push_back(std::move(r));
      }
      const api::Node& master = nodes_.at(a.node_id).node;
      a.master_addr = !master.address.empty() ? master.address : master.hostname;
      a.master_port = MasterPortLocked(a.node_id, e.job.id, e.job.attempt);
    }
    e.job.attempts.push_back(std::move(a));
    PersistJob(e, batch);
  }
  // Pending reasons are derived state: kept in memory, recomputed on every
  // pass, never worth a write of their own.
  for (auto info : plan.pending) {
    auto je = jobs_.find(queue[info.job].id);
    if (je == jobs_.end()) continue;
    if (!full && info.position > 0) info.position += waiting_after_pass_;
    je->second.job.pending_reason = sched::PendingReason(plan, info);
  }
  if (!full) waiting_after_pass_ += static_cast<int>(plan.pending.size());
}

// Rank 0 of a gang listens on a port of its node for the other ranks: one
// from kMasterPortBase on, spread by job id, not used by another gang whose
// rank 0 is on the same node.
int Core::MasterPortLocked(const std::string& node_id, const std::string& job_id,
                           int attempt) const {
  std::set<int> used;
  for (auto& [other, gpus] : nodes_.at(node_id).leases) {
    const api::Attempt* a = Current(jobs_.at(other).job);
    if (a != nullptr && !a->ranks.empty() && a->node_id == node_id) used.insert(a->master_port);
  }
  int offset = static_cast<int>(Fnv(job_id + "#" + std::to_string(attempt)) % kMasterPorts);
  for (int i = 0; i < kMasterPorts; ++i) {
    int port = kMasterPortBase + (offset + i) % kMasterPorts;
    if (!used.count(port)) return port;
  }
  return kMasterPortBase + offset;  // more gangs than ports on one node: cannot happen (GPUs)
}

// ------------------------------------------------------------------ auth

Result<Caller> Core::Authenticate(const std::string& bearer_token) const {
  if (bearer_token.empty()) return Status::Unauthenticated("missing bearer token");
  std::string hash = Sha256Hex(bearer_token);
  std::shared_lock lock(state_mu_);
  auto it = tokens_.find(hash);
  if (it == tokens_.end() || !ConstantTimeEquals(it->second.hash, hash)) {
    return Status::Unauthenticated("invalid token");
  }
  const auto& row = it->second;
  if (row.kind == "admin") return Caller{Scope::kAdmin, "admin"};
  if (row.kind == "user") return Caller{Scope::kUser, row.subject};
  if (row.kind == "join") return Caller{Scope::kJoin, row.subject};  // the provider
  if (row.kind == "node") return Caller{Scope::kNode, row.subject};
  return Status::Unauthenticated("invalid token");
}

bool Core::Visible(const Caller& caller, const Job& job) const {
  return caller.scope == Scope::kAdmin || job.owner == caller.subject;
}

// ------------------------------------------------------------------ user commands

Result<std::pair<Job, bool>> Core::SubmitJob(const Caller& caller, api::JobSpec spec,
                                             const std::string& idempotency_key) {
  if (!spec.code.empty() && code_checker_ && !code_checker_(caller.subject, spec.code)) {
    return Status::InvalidArgument("no uploaded code archive with this id (POST /v1/code first)",
                                   "code");
  }
  Job out;
  bool created = false;
  Status st = Run([&](store::WriteBatch& batch) {
    if (!idempotency_key.empty()) {
      auto it = idempotency_.find({caller.subject, idempotency_key});
      if (it != idempotency_.end()) {
        auto job = jobs_.find(it->second);
        if (job == jobs_.end()) {
          return Status::Conflict("Idempotency-Key was used for batch " + it->second);
        }
        out = job->second.job;
        return Status::Ok();
      }
    }
    for (size_t i = 0; i < spec.depends_on.size(); ++i) {
      const std::string& dep = spec.depends_on[i].job;
      auto j = jobs_.find(dep);
      auto b = batches_.find(dep);
      bool visible = (j != jobs_.end() && Visible(caller, j->second.job)) ||
                     (b != batches_.end() &&
                      (caller.scope == Scope::kAdmin || b->second.batch.owner == caller.subject));
      if (!visible) {
        return Status::InvalidArgument("no job or batch " + dep,
                                       "depends_on[" + std::to_string(i) + "].job");
      }
    }
    Job job;
    do {
      job.id = NewId("j-");
    } while (jobs_.count(job.id));
    job.owner = caller.subject;
    job.spec = std::move(spec);
    job.status = JobStatus::kQueued;
    job.created_at = clock_->NowMs();
    job.pending_reason = "waiting for the scheduler";
    // Admission: the job's worst case moves into escrow now, or it is not
    // accepted at all.
    Micros rate = MaxRateLocked(job.spec);
    Micros hold = WorstCaseLocked(job.spec, rate);
    if (hold > 0) {
      Micros available = ledger_.Balance(ledger::UserAccount(caller.subject));
      if (available < hold) {
        const auto& s = job.spec;
        std::string limit =
            s.max_cost > 0 && (s.max_runtime_s == 0 || hold == s.max_cost)
                ? "its max_cost"
                : s.max_runtime_s > 0
                      ? std::to_string(s.resources.gpu_count * s.resources.nodes) + " GPUs at up to " +
                            ledger::FormatCredits(rate) + " credits per GPU-hour for max_runtime " +
                            std::to_string(s.max_runtime_s) + "s + grace " +
                            std::to_string(s.grace_s) + "s"
                      : "the default cap for jobs without max_runtime or max_cost";
        return Status::InsufficientCredit(
            "the job may cost up to " + ledger::FormatCredits(hold) + " credits (" + limit +
            "), but " + ledger::FormatCredits(available) +
            " are available; redeem a card (tide redeem CODE) or lower max_runtime or max_cost");
      }
      TIDE_RETURN_IF_ERROR(CheckDailyCapLocked(caller.subject, hold));
      ledger::Transaction tx;
      tx.kind = "hold";
      tx.job_id = job.id;
      tx.entries = {{ledger::UserAccount(caller.subject), -hold},
                    {ledger::EscrowAccount(job.id), hold}};
      TIDE_RETURN_IF_ERROR(ApplyTxLocked(std::move(tx)));
    }
    JobEntry& e = AddJobLocked(std::move(job), batch);
    if (!idempotency_key.empty()) {
      idempotency_[{caller.subject, idempotency_key}] = e.job.id;
      batch.idempotency.push_back({caller.subject, idempotency_key, e.job.id});
    }
    // The scheduler runs in this same batch, before the write: the answer
    // already says whether the job was placed or why it waits.
    created = true;
    out.id = e.job.id;
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (created) {
    std::shared_lock lock(state_mu_);
    out = jobs_.at(out.id).job;
  }
  return std::make_pair(out, created);
}

Core::JobEntry& Core::AddJobLocked(Job job, store::WriteBatch& batch) {
  JobEntry& e = jobs_[job.id];
  e.job = std::move(job);
  e.order = next_order_++;
  e.status_since_mono = clock_->MonotonicMs();
  e.queued_since = e.job.created_at;
  job_order_.push_back(e.job.id);
  queued_[e.order] = e.job.id;
  if (!e.job.batch.empty() || !e.job.spec.depends_on.empty()) gated_[e.order] = e.job.id;
  submitted_since_pass_.push_back(e.job.id);
  command_is_submission_ = true;
  PersistJob(e, batch);
  return e;
}

Result<Job> Core::CancelJob(const Caller& caller, const std::string& id) {
  Job out;
  Status st = Run([&](store::WriteBatch& batch) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || !Visible(caller, it->second.job)) {
      return Status::NotFound("no job " + id);
    }
    JobEntry& e = it->second;
    if (!api::IsTerminal(e.job.status) && !e.job.cancel_requested) {
      CancelLocked(e, "cancelled", batch);
    }
    out = e.job;
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

void Core::CancelLocked(JobEntry& e, const std::string& reason, store::WriteBatch& batch) {
  bool delivered = DeliveredLocked(e.job);
  if (e.job.status == JobStatus::kStarting && !delivered) {
    // No agent has it yet: end it here and free its GPUs.
    e.job.cancel_requested = true;
    e.job.cancel_reason = reason;
    RequeueLocked(e, reason);
    schedule_needed_ = true;
  } else if (e.job.status == JobStatus::kQueued) {
    SetStatus(e, JobStatus::kCancelled);
    e.job.reason = reason;
    e.job.pending_reason.clear();
    e.job.finished_at = clock_->NowMs();
  } else {
    e.job.cancel_requested = true;
    e.job.cancel_reason = reason;
    DropUndeliveredRanksLocked(e);
    if (auto outcome = GangOutcome(e)) (void)FinishLocked(e, *outcome, batch);
  }
  PersistJob(e, batch);
}

// ------------------------------------------------------------------ reads

Result<Job> Core::GetJob(const Caller& caller, const std::string& id) const {
  std::shared_lock lock(state_mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || !Visible(caller, it->second.job)) return Status::NotFound("no job " + id);
  Job job = it->second.job;
  if (job.status == JobStatus::kQueued) {
    std::lock_guard<std::mutex> elock(estimate_mu_);
    auto e = estimates_.find(id);
    if (e != estimates_.end()) job.expected_start = e->second;
  }
  return job;
}

std::pair<std::vector<Job>, std::string> Core::ListJobs(const Caller& caller,
                                                        const std::string& status,
                                                        const std::string& tag, size_t limit,
                                                        const std::string& after,
                                                        const std::string& batch) const {
  std::shared_lock lock(state_mu_);
  std::vector<Job> out;
  bool started = after.empty();
  std::string next;
  for (auto it = job_order_.rbegin(); it != job_order_.rend(); ++it) {
    if (!started) {
      started = *it == after;
      continue;
    }
    const Job& job = jobs_.at(*it).job;
    if (!Visible(caller, job)) continue;
    if (!batch.empty() && job.batch != batch) continue;
    if (!status.empty() && status != api::JobStatusName(job.status)) continue;
    if (!tag.empty() &&
        std::find(job.spec.tags.begin(), job.spec.tags.end(), tag) == job.spec.tags.end()) {
      continue;
    }
    if (out.size() == limit) {
      next = out.back().id;
      break;
    }
    out.push_back(job);
  }
  return {std::move(out), next};
}

std::vector<NodeStatus> Core::ListNodes() const {
  std::shared_lock lock(state_mu_);
  std::vector<NodeStatus> out;
  for (auto& [id, n] : nodes_) out.push_back({n.node, n.leases});
  return out;
}

QueueSummary Core::Queue(const Caller& caller) const {
  QueueSummary out;
  std::map<std::string, QueueGroup> groups;
  auto type_of = [](const api::JobSpec& spec) {
    std::string t;
    for (const auto& g : spec.resources.gpu_types) t += (t.empty() ? "" : "|") + g;
    return t.empty() ? std::string("any") : t;
  };
  std::map<std::string, std::vector<int64_t>> waits;
  std::set<std::string> counted;  // running jobs already counted
  std::shared_lock lock(state_mu_);
  std::lock_guard<std::mutex> elock(estimate_mu_);
  out.estimated_at = estimated_at_;
  for (const auto& [id, n] : nodes_) {
    if (n.node.state != api::NodeState::kReady) continue;
    out.total_gpus += static_cast<int>(n.node.gpus.size());
    int used = 0;
    for (const auto& [job_id, gpus] : n.leases) used += static_cast<int>(gpus.size());
    if (!n.node.draining) out.free_gpus += static_cast<int>(n.node.gpus.size()) - used;
    for (const auto& [job_id, gpus] : n.leases) {
      const Job& job = jobs_.at(job_id).job;
      QueueGroup& g = groups[type_of(job.spec)];
      if (counted.insert(job_id).second) ++g.running_jobs;  // a gang counts once
      g.running_gpus += static_cast<int>(gpus.size());
    }
  }
  int64_t now = clock_->NowMs();
  for (const auto& [order, id] : queued_) {
    const Job& job = jobs_.at(id).job;
    std::string type = type_of(job.spec);
    QueueGroup& g = groups[type];
    ++g.pending_jobs;
    int gpus = job.spec.resources.gpu_count * job.spec.resources.nodes;
    g.pending_gpus += gpus;
    auto e = estimates_.find(id);
    int64_t start = e == estimates_.end() ? 0 : e->second;
    if (start > 0) waits[type].push_back(std::max<int64_t>(0, start - now));
    if (Visible(caller, job)) {
      out.jobs.push_back({id, job.spec.name, type, gpus, job.pending_reason, start});
    }
  }
  for (auto& [type, g] : groups) {
    g.gpu_type = type;
    auto& w = waits[type];
    if (!w.empty()) {
      std::sort(w.begin(), w.end());
      g.expected_wait_ms = w[w.size() / 2];
    }
    out.groups.push_back(g);
  }
  return out;
}

// ------------------------------------------------------------------ admin

Result<std::pair<UserInfo, std::string>> Core::CreateUser(const std::string& name) {
  UserInfo user;
  std::string token = NewToken("tide_u_");
  Status st = Run([&](store::WriteBatch& batch) {
    if (user_names_.count(name)) return Status::Conflict("user \"" + name + "\" already exists");
    user = UserInfo{NewId("u-"), name, clock_->NowMs()};
    users_[user.id] = user;
    user_names_[name] = user.id;
    store::TokenRow row{Sha256Hex(token), "user", user.id, user.created_at};
    tokens_[row.hash] = row;
    batch.users.push_back({user.id, user.name, user.created_at});
    batch.tokens.push_back(row);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return std::make_pair(user, token);
}

Status Core::SetWeight(const std::string& user_id, double weight) {
  if (!(weight > 0 && weight <= 1000)) return Status::InvalidArgument("must be above 0 and at most 1000", "weight");
  return Run([&](store::WriteBatch& batch) {
    if (!users_.count(user_id)) return Status::NotFound("no user " + user_id);
    fair_.SetWeight(user_id, weight);
    weights_[user_id] = weight;
    char text[32];
    snprintf(text, sizeof text, "%.6g", weight);
    batch.settings.push_back({"weight:" + user_id, text});
    return Status::Ok();
  });
}

double Core::Weight(const std::string& user_id) const {
  std::shared_lock lock(state_mu_);
  auto it = weights_.find(user_id);
  return it == weights_.end() ? 1.0 : it->second;
}

Result<std::string> Core::FindUser(const std::string& id_or_name) const {
  std::shared_lock lock(state_mu_);
  if (users_.count(id_or_name)) return id_or_name;
  auto it = user_names_.find(id_or_name);
  if (it != user_names_.end()) return it->second;
  return Status::NotFound("no user " + id_or_name);
}

Result<std::string> Core::CreateJoinToken(const std::string& provider) {
  std::string token = NewToken("tide_j_");
  Status st = Run([&](store::WriteBatch& batch) {
    if (!provider.empty() && !users_.count(provider)) return Status::NotFound("no user " + provider);
    store::TokenRow row{Sha256Hex(token), "join", provider, clock_->NowMs()};
    tokens_[row.hash] = row;
    batch.tokens.push_back(row);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return token;
}

Result<api::Node> Core::SetDraining(const std::string& id_or_name, bool draining, bool evict) {
  api::Node out;
  Status st = Run([&](store::WriteBatch& batch) {
    for (auto& [id, n] : nodes_) {
      if (id != id_or_name && n.node.name != id_or_name) continue;
      if (n.node.draining != draining) {
        n.node.draining = draining;
        PersistNode(n, batch);
        spdlog::info("node {} ({}) {}", n.node.name, id, draining ? "draining" : "open again");
      }
      if (draining && evict) {
        // Its jobs get the notice (reason node_draining) and, once stopped,
        // return to the queue to resume elsewhere: no retry is used up.
        std::vector<std::string> leased;
        for (auto& [job_id, gpus] : n.leases) leased.push_back(job_id);
        for (const std::string& job_id : leased) {
          JobEntry& e = jobs_.at(job_id);
          if (!StopReason(e.job).empty()) continue;
          if (!DeliveredLocked(e.job)) {
            RequeueLocked(e, "node_draining");
          } else {
            e.job.requeue_reason = "node_draining";
            DropUndeliveredRanksLocked(e);
          }
          PersistJob(e, batch);
        }
        schedule_needed_ = true;
      }
      out = n.node;
      return Status::Ok();
    }
    return Status::NotFound("no node " + id_or_name);
  });
  if (!st.ok()) return st;
  return out;
}

// ------------------------------------------------------------------ agents

Result<std::pair<std::string, std::string>> Core::RegisterNode(const Caller& caller,
                                                               const api::RegisterRequest& req) {
  // A node token names the node; a join token names the provider.
  std::string node_id = caller.scope == Scope::kNode ? caller.subject : "";
  std::string token;
  Status st = Run([&](store::WriteBatch& batch) {
    int64_t now = clock_->NowMs();
    if (caller.scope == Scope::kJoin) {
      node_id = NewId("n-");
      nodes_[node_id].node.owner = caller.subject;
      token = NewToken("tide_n_");
      store::TokenRow row{Sha256Hex(token), "node", node_id, now};
      tokens_[row.hash] = row;
      batch.tokens.push_back(row);
    } else if (!nodes_.count(node_id)) {
      return Status::NotFound("node " + node_id + " is unknown");
    }
    NodeEntry& n = nodes_[node_id];
    if (n.node.registered_at == 0) n.node.registered_at = now;
    n.node.id = node_id;
    n.node.name = req.name;
    n.node.hostname = req.hostname;
    n.node.address = req.address;
    n.node.prices = req.prices;
    n.node.gpus = req.gpus;
    n.node.labels = req.labels;
    n.node.images = req.images;
    n.node.runtime = req.runtime;
    for (auto& g : n.node.gpus) {
      if (g.model.empty()) g.model = api::CanonicalGpuModel(g.name);
    }
    n.node.state = api::NodeState::kReady;
    n.node.last_heartbeat = now;
    n.last_seen_mono = clock_->MonotonicMs();
    PersistNode(n, batch);
    spdlog::info("node {} ({}) registered with {} GPUs", req.name, node_id, req.gpus.size());
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return std::make_pair(node_id, token);
}

Result<api::AgentWork> Core::Heartbeat(const std::string& node_id, const api::Heartbeat& hb) {
  api::AgentWork work;
  Status st = Run([&](store::WriteBatch& batch) {
    auto it = nodes_.find(node_id);
    if (it == nodes_.end()) return Status::NotFound("node " + node_id + " is unknown");
    NodeEntry& n = it->second;
    int64_t now_mono = clock_->MonotonicMs();
    n.last_seen_mono = now_mono;
    n.node.last_heartbeat = clock_->NowMs();
    for (const auto& t : hb.gpus) {
      for (auto& g : n.node.gpus) {
        if (g.index != t.index) continue;
        g.utilization_pct = t.utilization_pct;
        g.memory_used_mb = t.memory_used_mb;
        g.temperature_c = t.temperature_c;
      }
    }
    if (n.node.state == api::NodeState::kLost) {
      spdlog::info("node {} ({}) is back", n.node.name, node_id);
      n.node.state = api::NodeState::kReady;
      PersistNode(n, batch);
    }
    // Reconcile what the agent runs with what we leased to it.
    std::set<std::string> reported;
    for (const auto& r : hb.running) {
      reported.insert(r.job_id);
      auto je = jobs_.find(r.job_id);
      // A lease on this node: the job, or one rank of a gang, runs here.
      bool ours = je != jobs_.end() && je->second.job.attempt == r.attempt &&
                  n.leases.count(r.job_id);
      if (!ours) {
        work.cancels.push_back({r.job_id, r.attempt, "not_leased", 0});
      } else if (std::string why = StopReason(je->second.job); !why.empty()) {
        work.cancels.push_back({r.job_id, r.attempt, why, je->second.job.spec.grace_s});
      }
    }
    std::vector<std::string> lost;
    for (auto& [job_id, gpus] : n.leases) {
      if (reported.count(job_id)) continue;
      JobEntry& e = jobs_.at(job_id);
      if (now_mono - e.status_since_mono < options_.report_grace_ms) continue;
      const api::Attempt* a = Current(e.job);
      int rank = RankOn(e.job, node_id);
      bool started_here = e.job.status == JobStatus::kRunning ||
                          (a != nullptr && rank >= 0 && !a->ranks.empty() &&
                           a->ranks[static_cast<size_t>(rank)].started_at > 0);
      if (started_here || !StopReason(e.job).empty()) {
        lost.push_back(job_id);  // a cancelled one ends as cancelled
      } else {
        // Starting but never taken up: offer it again.
        std::lock_guard<std::mutex> lock(delivery_mu_);
        delivered_.erase(DeliveryKey(job_id, e.job.attempt, node_id));
      }
    }
    for (auto& job_id : lost) {
      JobEntry& e = jobs_.at(job_id);
      spdlog::warn("node {} no longer runs {} (attempt {}); requeueing", node_id, job_id,
                   e.job.attempt);
      LostPartLocked(e, node_id, "lost_by_agent", batch);
      PersistJob(e, batch);
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return work;
}

Result<api::AgentWork> Core::PollWork(const std::string& node_id, int64_t wait_ms) {
  int64_t deadline = clock_->MonotonicMs() + wait_ms;
  while (true) {
    uint64_t seen = epoch();
    api::AgentWork work;
    {
      std::shared_lock lock(state_mu_);
      auto it = nodes_.find(node_id);
      if (it == nodes_.end()) return Status::NotFound("node " + node_id + " is unknown");
      std::lock_guard<std::mutex> dlock(delivery_mu_);
      for (auto& [job_id, gpus] : it->second.leases) {
        const JobEntry& e = jobs_.at(job_id);
        std::string key = DeliveryKey(job_id, e.job.attempt, node_id);
        if (std::string why = StopReason(e.job); !why.empty()) {
          if (cancel_delivered_.insert(key).second) {
            work.cancels.push_back({job_id, e.job.attempt, why, e.job.spec.grace_s});
          }
          continue;
        }
        if (e.job.status == JobStatus::kStarting && !delivered_.count(key) &&
            !uncommitted_.count(job_id)) {
          delivered_.insert(key);
          api::Assignment as{e.job, {}};
          // The agent sees its own part: its node, its GPUs, its rank.
          as.job.node_id = node_id;
          as.job.gpus = gpus;
          const api::Attempt* a = Current(e.job);
          if (a != nullptr && !a->ranks.empty()) {
            as.gang.rank = RankOn(e.job, node_id);
            as.gang.nnodes = static_cast<int>(a->ranks.size());
            as.gang.master_addr = a->master_addr;
            as.gang.master_port = a->master_port;
          }
          work.assignments.push_back(std::move(as));
        }
      }
    }
    if (!work.assignments.empty() || !work.cancels.empty()) return work;
    if (clock_->MonotonicMs() >= deadline) return work;
    WaitChange(seen, deadline);
  }
}

Result<int> Core::CheckAgentJob(const std::string& node_id, const std::string& job_id,
                                int attempt, bool current_only) const {
  std::shared_lock lock(state_mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return Status::NotFound("no job " + job_id);
  const Job& job = it->second.job;
  auto not_here = [&] {
    return Status::NotFound("job " + job_id + " attempt " + std::to_string(attempt) +
                            " is not assigned to this node");
  };
  if (current_only) {
    auto n = nodes_.find(node_id);
    int rank = RankOn(job, node_id);
    bool leased = n != nodes_.end() && n->second.leases.count(job_id) && rank >= 0 &&
                  job.attempt == attempt;
    if (!leased) {
      bool ever = false;
      for (auto& a : job.attempts) ever = ever || RankIn(job, a.attempt, node_id) >= 0;
      if (!ever) return Status::NotFound("job " + job_id + " is not assigned to this node");
      return Status::Conflict("job " + job_id + " attempt " + std::to_string(attempt) +
                              " is not leased to this node");
    }
    return rank;
  }
  if (attempt > 0) {
    int rank = RankIn(job, attempt, node_id);
    if (rank < 0) return not_here();
    return rank;
  }
  int rank = RankOn(job, node_id);
  if (rank < 0) return Status::NotFound("job " + job_id + " is not assigned to this node");
  return rank;
}

Status Core::RecordCheckpoint(const std::string& node_id, const std::string& job_id, int attempt,
                              int64_t bytes, const std::function<Status()>& commit) {
  return Run([&](store::WriteBatch& batch) {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return Status::NotFound("no job " + job_id);
    JobEntry& e = it->second;
    if (e.job.attempt != attempt || RankOn(e.job, node_id) < 0) {
      return Status::Conflict("job " + job_id + " attempt " + std::to_string(attempt) +
                              " is not leased to this node");
    }
    if (commit) {
      TIDE_RETURN_IF_ERROR(commit());
    }
    e.job.checkpoint_attempt = attempt;
    e.job.checkpoint_bytes = bytes;
    e.job.checkpoint_at = clock_->NowMs();
    PersistJob(e, batch);
    return Status::Ok();
  });
}

Status Core::JobEvent(const std::string& node_id, const std::string& job_id,
                      const api::JobEvent& ev) {
  return Run([&](store::WriteBatch& batch) {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return Status::NotFound("no job " + job_id);
    JobEntry& e = it->second;
    auto n = nodes_.find(node_id);
    int rank = RankOn(e.job, node_id);
    bool leased = n != nodes_.end() && n->second.leases.count(job_id) && rank >= 0 &&
                  e.job.attempt == ev.attempt;
    if (!leased) {
      // An event for an attempt we already ended (node was lost, job
      // requeued): the agent must stop it, and nothing changes here.
      return Status::Conflict("job " + job_id + " attempt " + std::to_string(ev.attempt) +
                              " is not leased to this node");
    }
    int64_t now = clock_->NowMs();
    const api::Attempt* current = Current(e.job);
    if (current != nullptr && !current->ranks.empty()) {
      auto outcome = GangEventLocked(e, rank, ev, batch);
      if (!outcome) return Status::Ok();  // other ranks still run
      return FinishLocked(e, *outcome, batch);
    }
    if (ev.state == "running") {
      if (e.job.status == JobStatus::kStarting) {
        SetStatus(e, JobStatus::kRunning);
        e.job.started_at = now;
        if (!e.job.attempts.empty()) e.job.attempts.back().started_at = now;
        PersistJob(e, batch);
      }
      return Status::Ok();
    }
    return FinishLocked(e, ev, batch);
  });
}

// A rank of a gang reports. Returns the outcome of the whole job once its
// last rank has exited, nullopt while others still run.
std::optional<api::JobEvent> Core::GangEventLocked(JobEntry& e, int rank, const api::JobEvent& ev,
                                                   store::WriteBatch& batch) {
  int64_t now = clock_->NowMs();
  api::Attempt& a = e.job.attempts.back();
  api::Rank& r = a.ranks[static_cast<size_t>(rank)];
  if (ev.state == "running") {
    if (r.started_at == 0) {
      r.started_at = now;
      if (a.started_at == 0) a.started_at = now;
      bool all = true;
      for (const auto& other : a.ranks) all = all && other.started_at > 0;
      if (all && e.job.status == JobStatus::kStarting) {
        SetStatus(e, JobStatus::kRunning);
        e.job.started_at = now;
      }
      PersistJob(e, batch);
    }
    return std::nullopt;
  }
  if (ev.reason == "agent_shutdown" && !e.job.cancel_requested) {
    // That node's part must run again, so the whole gang does.
    LostPartLocked(e, r.node_id, "agent_shutdown", batch);
    PersistJob(e, batch);
    return std::nullopt;
  }
  // This rank is done: its GPUs are free now.
  r.finished_at = now;
  r.reason = ev.reason;
  r.exit_code = ev.exit_code;
  if (r.started_at == 0) r.started_at = now;
  {
    std::lock_guard<std::mutex> lock(delivery_mu_);
    delivered_.erase(DeliveryKey(e.job.id, e.job.attempt, r.node_id));
    cancel_delivered_.erase(DeliveryKey(e.job.id, e.job.attempt, r.node_id));
  }
  nodes_[r.node_id].leases.erase(e.job.id);
  bool failed = !ev.reason.empty() || !ev.exit_code || *ev.exit_code != 0;
  if (failed && StopReason(e.job).empty()) {
    e.job.gang_failure = !ev.reason.empty() ? ev.reason
                                            : "exit_code:" + std::to_string(ev.exit_code.value_or(-1));
    spdlog::info("job {} attempt {}: rank {} failed ({}); stopping the other ranks", e.job.id,
                 e.job.attempt, rank, e.job.gang_failure);
    DropUndeliveredRanksLocked(e);
  }
  auto out = GangOutcome(e);
  if (!out) PersistJob(e, batch);
  return out;
}

// One node's part of a job is gone (node lost, agent lost it or stopped). A
// single-node job returns to the queue. In a gang only that rank ends: the
// others get the notice (reason `reason`) with their grace, and the job
// returns to the queue, or ends as it was already ending, once all stopped.
void Core::LostPartLocked(JobEntry& e, const std::string& node_id, const std::string& reason,
                          store::WriteBatch& batch) {
  const api::Attempt* current = Current(e.job);
  if (current == nullptr || current->ranks.empty()) {
    RequeueLocked(e, reason);
    return;
  }
  api::Attempt& a = e.job.attempts.back();
  int rank = RankOn(e.job, node_id);
  if (rank >= 0 && a.ranks[static_cast<size_t>(rank)].finished_at == 0) {
    api::Rank& r = a.ranks[static_cast<size_t>(rank)];
    r.finished_at = clock_->NowMs();
    if (r.started_at == 0) r.started_at = r.finished_at;
    r.reason = reason;
    nodes_[node_id].leases.erase(e.job.id);
    std::lock_guard<std::mutex> lock(delivery_mu_);
    delivered_.erase(DeliveryKey(e.job.id, e.job.attempt, node_id));
    cancel_delivered_.erase(DeliveryKey(e.job.id, e.job.attempt, node_id));
  }
  if (StopReason(e.job).empty()) {
    e.job.requeue_reason = reason;
    spdlog::info("job {} attempt {}: rank {} {}; stopping the other ranks to run it again",
                 e.job.id, e.job.attempt, rank, reason);
  }
  DropUndeliveredRanksLocked(e);
  if (auto outcome = GangOutcome(e)) (void)FinishLocked(e, *outcome, batch);
  schedule_needed_ = true;
}

// Ranks no agent has been handed yet cannot get the notice: when the gang
// is being stopped they end here, at once.
void Core::DropUndeliveredRanksLocked(JobEntry& e) {
  const api::Attempt* current = Current(e.job);
  if (current == nullptr || current->ranks.empty()) return;
  api::Attempt& a = e.job.attempts.back();
  std::string why = StopReason(e.job);
  int64_t now = clock_->NowMs();
  std::lock_guard<std::mutex> lock(delivery_mu_);
  for (auto& r : a.ranks) {
    if (r.finished_at > 0 || r.started_at > 0 ||
        delivered_.count(DeliveryKey(e.job.id, e.job.attempt, r.node_id))) {
      continue;
    }
    r.finished_at = now;
    if (r.started_at == 0) r.started_at = now;
    r.reason = why;
    nodes_[r.node_id].leases.erase(e.job.id);
  }
}

// The outcome of a gang attempt once its last rank has exited; nullopt
// while any still runs.
std::optional<api::JobEvent> Core::GangOutcome(const JobEntry& e) const {
  const api::Attempt* current = Current(e.job);
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
    const api::Rank* first = nullptr;
    for (const auto& other : a.ranks) {
      bool bad = !other.reason.empty() || !other.exit_code || *other.exit_code != 0;
      // Ranks stopped by the gang or gone with their node did not fail.
      static const std::set<std::string> kNotFailures = {
          "gang_failed", "agent_shutdown", "node_lost", "lost_by_agent", "preempted", "cancelled"};
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

// The job's (last) process exited: it ends, or returns to the queue.
Status Core::FinishLocked(JobEntry& e, const api::JobEvent& ev, store::WriteBatch& batch) {
  int64_t now = clock_->NowMs();
  if (!e.job.requeue_reason.empty() && e.job.gang_failure.empty() && !e.job.cancel_requested &&
      ev.reason == e.job.requeue_reason) {
    // A node of the gang went away; every rank has stopped: run it again.
    RequeueLocked(e, e.job.requeue_reason);
    PersistJob(e, batch);
    return Status::Ok();
  }
  if (ev.reason == "agent_shutdown" && !e.job.cancel_requested) {
    // The agent was stopped, not the job: it runs again elsewhere.
    RequeueLocked(e, "agent_shutdown");
    PersistJob(e, batch);
    return Status::Ok();
  }
  if (e.job.preempt_requested && !e.job.cancel_requested && ev.reason == "preempted") {
    // Stopped for higher-ranked work: back to the queue, same id, next
    // attempt. Whatever the exit, it does not count as a failure.
    RequeueLocked(e, "preempted");
    PersistJob(e, batch);
    return Status::Ok();
  }
  std::string reason;
  JobStatus final_status;
  if (e.job.cancel_requested && e.job.cancel_reason == "budget_exceeded") {
    final_status = JobStatus::kFailed;  // stopped by its own cost cap
    reason = e.job.cancel_reason;
  } else if (e.job.cancel_requested) {
    final_status = JobStatus::kCancelled;
    reason = e.job.cancel_reason;
  } else if (ev.reason == "timeout") {
    final_status = JobStatus::kFailed;
    reason = "timeout";
  } else if (!ev.reason.empty()) {
    final_status = JobStatus::kFailed;
    reason = ev.reason;
  } else if (ev.exit_code && *ev.exit_code == 0) {
    final_status = JobStatus::kCompleted;
  } else {
    final_status = JobStatus::kFailed;
    reason = "exit_code:" + std::to_string(ev.exit_code.value_or(-1));
  }
  if (final_status == JobStatus::kFailed && !e.job.cancel_requested &&
      e.job.retries < e.job.spec.retry_times && IsOwnFailure(reason)) {
    // The job's own failure, and its retry policy allows another attempt.
    e.job.retries += 1;
    spdlog::info("job {} attempt {} failed ({}): retry {} of {}", e.job.id, e.job.attempt, reason,
                 e.job.retries, e.job.spec.retry_times);
    RequeueLocked(e, reason, ev.exit_code);
    PersistJob(e, batch);
    return Status::Ok();
  }
  ReleaseLocked(e, reason.empty() ? "completed" : reason, ev.exit_code);
  SetStatus(e, final_status);
  e.job.reason = reason;
  e.job.exit_code = ev.exit_code;
  e.job.finished_at = now;
  if (e.job.started_at == 0) e.job.started_at = now;
  PersistJob(e, batch);
  return Status::Ok();
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
