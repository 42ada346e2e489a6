#include "scheduler/replay/simulate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <unordered_map>

#include "scheduler/fair_share.h"
#include "scheduler/feasibility.h"
#include "scheduler/rank.h"
#include "scheduler/schedule.h"

namespace tide::sched::replay {

namespace {

constexpr int64_t kMs = 1000;

struct JobState {
  int nodes = 1;
  int per_node = 1;
  int64_t remaining_s = 0;  // work left
  double attained_gpu_s = 0;
  bool running = false;
  int64_t start_s = 0;    // of the current attempt
  int64_t penalty_s = 0;  // of the current attempt
  uint32_t version = 0;   // bumps when a scheduled finish no longer holds
  size_t queue_pos = SIZE_MAX;
  size_t run_pos = SIZE_MAX;
  std::vector<std::pair<size_t, std::vector<int>>> allocs;  // node index, GPU indices
};

struct Event {
  int64_t at;
  uint8_t kind;  // 0 finish, 1 wake (service level crossing)
  size_t job;
  uint32_t version;
  bool operator>(const Event& o) const {
    if (at != o.at) return at > o.at;
    if (kind != o.kind) return kind > o.kind;
    return job > o.job;
  }
};

// One partition: `jobs` (indices into trace) on `nodes`.
class Replay {
 public:
  Replay(const std::vector<TraceJob>& trace, std::vector<size_t> jobs, std::vector<NodeView> nodes,
         const SimOptions& options, SimResult* out)
      : trace_(trace), ids_(std::move(jobs)), nodes_(std::move(nodes)), opt_(options), out_(out),
        fair_(options.fair_half_life_s * kMs) {}

  void Run();
  int64_t busy_gpu_s() const { return busy_gpu_s_; }
  // Micro-credits x seconds / hour: divide by 3600e6 for credits.
  double cost_micro_s() const { return cost_micro_s_; }
  double idle_gpu_s() const { return idle_gpu_s_; }
  double stranded_gpu_s() const { return stranded_gpu_s_; }

 private:
  void Arrive(size_t j, int64_t now);
  void Start(size_t j, const Placement& p, int64_t now);
  void Stop(size_t j, int64_t now, bool finished);
  void Wake(size_t j, int64_t now);
  void RemoveQueued(size_t j);
  void Allocate(size_t node, int gpus);  // negative: freed
  void Advance(int64_t now);

  const std::vector<TraceJob>& trace_;
  std::vector<size_t> ids_;
  std::vector<NodeView> nodes_;
  const SimOptions& opt_;
  SimResult* out_;
  FairShare fair_;
  std::unordered_map<std::string, size_t> node_index_;
  std::unordered_map<std::string, size_t> job_index_;
  std::vector<JobState> state_;  // by trace index
  std::vector<PendingJob> queue_;
  std::vector<size_t> queue_job_;  // trace index of each queue_ entry
  std::vector<RunningJob> running_;
  std::vector<size_t> running_job_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  int free_gpus_ = 0;
  int64_t busy_gpu_s_ = 0;
  std::vector<int> node_free_;  // free GPUs per node
  int stranded_ = 0;            // free GPUs on nodes that are partly used
  int64_t last_s_ = -1;         // time the integrals below reach
  double idle_gpu_s_ = 0, stranded_gpu_s_ = 0, cost_micro_s_ = 0;
};

void Replay::Allocate(size_t node, int gpus) {
  auto stranded = [&] {
    int f = node_free_[node];
    return f > 0 && f < static_cast<int>(nodes_[node].gpus.size()) ? f : 0;
  };
  stranded_ -= stranded();
  node_free_[node] -= gpus;
  free_gpus_ -= gpus;
  stranded_ += stranded();
}

void Replay::Advance(int64_t now) {
  if (last_s_ >= 0 && now > last_s_) {
    auto dt = static_cast<double>(now - last_s_);
    idle_gpu_s_ += free_gpus_ * dt;
    stranded_gpu_s_ += stranded_ * dt;
  }
  last_s_ = now;
}

void Replay::Arrive(size_t j, int64_t now) {
  const TraceJob& t = trace_[j];
  JobState& s = state_[j];
  PendingJob p;
  p.id = t.id;
  p.account = t.account;
  p.nodes = s.nodes;
  p.gpu_count = s.per_node;
  p.gpu_types = t.gpu_types;
  p.cpus = t.cpus / s.nodes;
  p.memory_mb = t.memory_mb / s.nodes;
  int64_t walltime = t.walltime_s;
  if (walltime == 0 && opt_.walltime_factor > 0) {
    walltime = static_cast<int64_t>(std::ceil(static_cast<double>(t.duration_s) * opt_.walltime_factor));
  }
  // A resumed attempt needs its restart penalty on top of the work left.
  if (walltime > 0) p.max_runtime_ms = (walltime - (t.duration_s - s.remaining_s) + s.penalty_s) * kMs;
  p.submitted_at = t.submit_s * kMs;
  p.queued_since = now * kMs;
  p.attained_gpu_s = static_cast<int64_t>(s.attained_gpu_s);
  p.oracle_duration_ms = t.duration_s * kMs;
  s.queue_pos = queue_.size();
  queue_.push_back(std::move(p));
  queue_job_.push_back(j);
}

// Removes entry `pos` of `items` (and of the parallel `jobs`) by moving the
// last one into its place; `slot` gives the JobState field that tracks it.
template <typename T>
void SwapRemove(std::vector<T>& items, std::vector<size_t>& jobs, std::vector<JobState>& state,
                size_t JobState::*slot, size_t pos) {
  size_t removed = jobs[pos], last = items.size() - 1;
  if (pos != last) {
    items[pos] = std::move(items[last]);
    jobs[pos] = jobs[last];
    state[jobs[pos]].*slot = pos;
  }
  items.pop_back();
  jobs.pop_back();
  state[removed].*slot = SIZE_MAX;
}

void Replay::RemoveQueued(size_t j) {
  SwapRemove(queue_, queue_job_, state_, &JobState::queue_pos, state_[j].queue_pos);
}

void Replay::Start(size_t j, const Placement& p, int64_t now) {
  const TraceJob& t = trace_[j];
  JobState& s = state_[j];
  JobResult& r = out_->per_job[j];
  PendingJob pending = std::move(queue_[s.queue_pos]);
  RemoveQueued(j);
  s.running = true;
  s.start_s = now;
  s.penalty_s = r.attempts > 0 ? opt_.restart_penalty_s : 0;
  ++r.attempts;
  if (r.start_s < 0) r.start_s = now;
  RunningJob run;
  run.id = t.id;
  run.account = t.account;
  run.started_at = now * kMs;
  if (pending.max_runtime_ms > 0) run.expected_end = run.started_at + pending.max_runtime_ms;
  run.attained_gpu_s = static_cast<int64_t>(s.attained_gpu_s);
  run.preemptible = true;  // trace jobs resume from checkpoints
  run.last_checkpoint = run.started_at;
  for (const auto& a : p.allocs) {
    size_t n = node_index_.at(a.node_id);
    for (int g : a.gpus) nodes_[n].gpus[static_cast<size_t>(g)].free = false;
    nodes_[n].cpus_free -= pending.cpus;
    nodes_[n].memory_free_mb -= pending.memory_mb;
    Allocate(n, static_cast<int>(a.gpus.size()));
    s.allocs.push_back({n, a.gpus});
  }
  run.allocs = p.allocs;
  s.run_pos = running_.size();
  running_.push_back(std::move(run));
  running_job_.push_back(j);
  events_.push({now + s.penalty_s + s.remaining_s, 0, j, s.version});
  Wake(j, now);
}

// Under tide, the moment the job's service crosses the next level.
void Replay::Wake(size_t j, int64_t now) {
  if (opt_.config.policy != Policy::kTide || !opt_.config.preemption) return;
  const JobState& s = state_[j];
  double gpus = s.nodes * s.per_node;
  double attained = s.attained_gpu_s + gpus * static_cast<double>(now - s.start_s);
  for (int64_t t : opt_.config.las_thresholds_gpu_s) {
    if (attained < static_cast<double>(t)) {
      auto at = now + static_cast<int64_t>(std::ceil((static_cast<double>(t) - attained) / gpus));
      events_.push({std::max(at, now + 1), 1, j, s.version});
      return;
    }
  }
}

void Replay::Stop(size_t j, int64_t now, bool finished) {
  JobState& s = state_[j];
  const TraceJob& t = trace_[j];
  int gpus = s.nodes * s.per_node;
  int64_t ran = now - s.start_s;
  busy_gpu_s_ += ran * gpus;
  s.attained_gpu_s += static_cast<double>(ran * gpus);
  fair_.Charge(t.account, static_cast<double>(ran * gpus), now * kMs);
  for (auto& [n, idx] : s.allocs) {
    for (int g : idx) nodes_[n].gpus[static_cast<size_t>(g)].free = true;
    nodes_[n].cpus_free += t.cpus / s.nodes;
    nodes_[n].memory_free_mb += t.memory_mb / s.nodes;
    Allocate(n, -static_cast<int>(idx.size()));
    cost_micro_s_ += static_cast<double>(idx.size()) * static_cast<double>(ran) *
                     static_cast<double>(nodes_[n].price);
  }
  s.allocs.clear();
  SwapRemove(running_, running_job_, state_, &JobState::run_pos, s.run_pos);
  s.running = false;
  ++s.version;
  if (finished) {
    out_->per_job[j].finish_s = now;
    s.remaining_s = 0;
    return;
  }
  s.remaining_s -= std::max<int64_t>(0, ran - s.penalty_s);
  s.remaining_s = std::max<int64_t>(s.remaining_s, 1);
  s.penalty_s = opt_.restart_penalty_s;
  ++out_->preemptions;
  Arrive(j, now);
  queue_.back().last_run_ms = ran * kMs;
}

void Replay::Run() {
  node_free_.resize(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    node_index_[nodes_[i].id] = i;
    node_free_[i] = static_cast<int>(nodes_[i].gpus.size());
    free_gpus_ += node_free_[i];
  }
  int max_gpus = 0;
  for (const auto& n : nodes_) max_gpus = std::max<int>(max_gpus, static_cast<int>(n.gpus.size()));
  state_.resize(trace_.size());
  std::stable_sort(ids_.begin(), ids_.end(),
                   [&](size_t a, size_t b) { return trace_[a].submit_s < trace_[b].submit_s; });
  for (size_t j : ids_) {
    const TraceJob& t = trace_[j];
    JobState& s = state_[j];
    job_index_[t.id] = j;
    // More GPUs than a node has: a gang of whole nodes.
    s.nodes = t.gpus <= max_gpus ? 1 : (t.gpus + max_gpus - 1) / max_gpus;
    s.per_node = (t.gpus + s.nodes - 1) / s.nodes;
    s.remaining_s = std::max<int64_t>(1, t.duration_s);
    out_->per_job[j].whole_node = s.per_node >= max_gpus;
  }
  const bool tide = opt_.config.policy == Policy::kTide;
  const bool can_preempt = opt_.config.preemption && tide;
  size_t next = 0;
  while (next < ids_.size() || !events_.empty()) {
    int64_t now = INT64_MAX;
    if (next < ids_.size()) now = trace_[ids_[next]].submit_s;
    if (!events_.empty()) now = std::min(now, events_.top().at);
    Advance(now);
    bool changed = false;
    bool freed = false;  // GPUs came free: waiting work may start
    int min_arrival = INT32_MAX;
    while (!events_.empty() && events_.top().at == now) {
      Event e = events_.top();
      events_.pop();
      if (state_[e.job].version != e.version || !state_[e.job].running) continue;
      if (e.kind == 0) {
        Stop(e.job, now, true);
        freed = true;
      } else {
        Wake(e.job, now);
      }
      changed = true;
    }
    while (next < ids_.size() && trace_[ids_[next]].submit_s == now) {
      const JobState& s = state_[ids_[next]];
      min_arrival = std::min(min_arrival, s.per_node);
      Arrive(ids_[next++], now);
      changed = true;
    }
    if (!changed || queue_.empty()) continue;
    if (!can_preempt && !freed) {
      // Only arrivals: everything older already failed to use the free
      // GPUs, so a pass can only start a newcomer, and only where one node
      // has as many free GPUs as it needs per node.
      int most_free = 0;
      for (const auto& n : nodes_) {
        int f = 0;
        for (const auto& g : n.gpus) f += g.free ? 1 : 0;
        most_free = std::max(most_free, f);
      }
      if (most_free < min_arrival) continue;
    }
    std::map<std::string, AccountShare> shares;
    if (opt_.config.policy == Policy::kFair || tide) shares = fair_.Shares(now * kMs);
    if (tide) {
      for (size_t r = 0; r < running_.size(); ++r) {
        const JobState& s = state_[running_job_[r]];
        running_[r].attained_gpu_s = static_cast<int64_t>(
            s.attained_gpu_s + static_cast<double>(s.nodes * s.per_node * (now - s.start_s)));
      }
    }
    // Preempted work stops at once here, so a second pass at the same
    // instant can give its GPUs to the job that asked for them.
    for (int round = 0; round < 4; ++round) {
      if (opt_.on_pass) opt_.on_pass({nodes_, queue_, running_, now * kMs});
      Plan plan = Schedule({nodes_, queue_, running_, shares, opt_.config, now * kMs});
      ++out_->scheduler_passes;
      for (const auto& p : plan.placements) Start(job_index_.at(p.job_id), p, now);
      if (plan.preemptions.empty()) break;
      for (const auto& pre : plan.preemptions) {
        size_t v = job_index_.at(pre.victim_id);
        if (state_[v].running) Stop(v, now, false);
      }
    }
  }
}

void Summarize(SimResult& r, int64_t total_gpus, int64_t busy_gpu_s) {
  std::vector<double> jct;
  double queue_sum = 0, whole_queue_sum = 0;
  int64_t first = INT64_MAX, last = 0;
  std::map<std::string, AccountResult> accounts;
  for (auto& j : r.per_job) {
    if (j.finish_s < 0) continue;
    double c = static_cast<double>(j.finish_s - j.submit_s);
    double q = static_cast<double>(j.start_s - j.submit_s);
    jct.push_back(c);
    queue_sum += q;
    if (j.whole_node) {
      ++r.whole_node_jobs;
      whole_queue_sum += q;
    }
    first = std::min(first, j.submit_s);
    last = std::max(last, j.finish_s);
    AccountResult& a = accounts[j.account];
    a.account = j.account;
    ++a.jobs;
    a.avg_jct_s += c;
    a.avg_queue_s += q;
    a.gpu_hours += static_cast<double>(j.gpus) * static_cast<double>(j.duration_s) / 3600;
    a.ftf += c / static_cast<double>(std::max<int64_t>(1, j.duration_s));
  }
  r.jobs = static_cast<int>(jct.size());
  if (r.jobs == 0) return;
  std::sort(jct.begin(), jct.end());
  double sum = 0;
  for (double v : jct) sum += v;
  r.avg_jct_s = sum / r.jobs;
  r.p50_jct_s = jct[static_cast<size_t>(0.50 * static_cast<double>(jct.size() - 1))];
  r.p99_jct_s = jct[static_cast<size_t>(0.99 * static_cast<double>(jct.size() - 1))];
  r.avg_queue_s = queue_sum / r.jobs;
  if (r.whole_node_jobs > 0) r.avg_queue_whole_node_s = whole_queue_sum / r.whole_node_jobs;
  r.makespan_s = last - first;
  if (r.makespan_s > 0 && total_gpus > 0) {
    r.gpu_utilization = static_cast<double>(busy_gpu_s) /
                        (static_cast<double>(total_gpus) * static_cast<double>(r.makespan_s));
  }
  double s1 = 0, s2 = 0;
  for (auto& [name, a] : accounts) {
    a.avg_jct_s /= a.jobs;
    a.avg_queue_s /= a.jobs;
    a.ftf /= a.jobs;
    s1 += a.ftf;
    s2 += a.ftf * a.ftf;
    r.max_ftf = std::max(r.max_ftf, a.ftf);
    r.per_account.push_back(a);
  }
  r.jain_ftf = s2 > 0 ? s1 * s1 / (static_cast<double>(accounts.size()) * s2) : 1;
}

}  // namespace

SimResult Simulate(const std::vector<TraceJob>& trace, const std::vector<NodeView>& nodes,
                   const SimOptions& options) {
  SimResult r;
  r.per_job.resize(trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    const auto& t = trace[i];
    r.per_job[i] = {t.id, t.account, t.gpus, t.submit_s, t.duration_s, -1, -1, 0, ""};
  }
  int64_t total_gpus = 0;
  for (const auto& n : nodes) total_gpus += static_cast<int64_t>(n.gpus.size());

  // Partitions: nodes by label value, jobs by account.
  std::map<std::string, std::vector<NodeView>> parts;
  std::map<std::string, std::vector<size_t>> part_jobs;
  if (options.partition_label.empty()) {
    parts[""] = nodes;
    for (size_t i = 0; i < trace.size(); ++i) part_jobs[""].push_back(i);
  } else {
    for (const auto& n : nodes) {
      auto it = n.labels.find(options.partition_label);
      if (it != n.labels.end()) parts[it->second].push_back(n);
    }
    for (size_t i = 0; i < trace.size(); ++i) {
      if (parts.count(trace[i].account)) {
        part_jobs[trace[i].account].push_back(i);
      } else {
        r.per_job[i].note = "no partition " + options.partition_label + "=" + trace[i].account;
      }
    }
  }
  int64_t busy = 0;
  double idle = 0, stranded = 0;
  for (auto& [name, part_nodes] : parts) {
    auto it = part_jobs.find(name);
    if (it == part_jobs.end()) continue;
    // Jobs no node of the partition can ever hold are reported, not queued.
    std::vector<size_t> runnable;
    int max_gpus = 0;
    for (const auto& n : part_nodes) max_gpus = std::max<int>(max_gpus, static_cast<int>(n.gpus.size()));
    for (size_t j : it->second) {
      const TraceJob& t = trace[j];
      int want_nodes = t.gpus <= max_gpus ? 1 : (t.gpus + max_gpus - 1) / max_gpus;
      int per_node = (t.gpus + want_nodes - 1) / want_nodes;
      PendingJob probe;
      probe.nodes = want_nodes;
      probe.gpu_count = per_node;
      probe.gpu_types = t.gpu_types;
      probe.cpus = t.cpus / want_nodes;
      probe.memory_mb = t.memory_mb / want_nodes;
      WaitKind kind;
      std::string why = Unsatisfiable(probe, part_nodes, &kind);
      if (!why.empty()) {
        r.per_job[j].note = why;
      } else {
        runnable.push_back(j);
      }
    }
    Replay replay(trace, std::move(runnable), std::move(part_nodes), options, &r);
    replay.Run();
    busy += replay.busy_gpu_s();
    r.cost_credits += replay.cost_micro_s() / 3600e6;
    idle += replay.idle_gpu_s();
    stranded += replay.stranded_gpu_s();
  }
  if (idle > 0) r.fragmentation = stranded / idle;
  for (const auto& j : r.per_job) r.unschedulable += j.finish_s < 0 ? 1 : 0;
  Summarize(r, total_gpus, busy);
  return r;
}

}  // namespace tide::sched::replay
