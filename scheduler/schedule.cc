#include "scheduler/schedule.h"

#include <algorithm>
#include <cstdint>
#include <climits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

#include "common/hash.h"
#include "scheduler/feasibility.h"
#include "scheduler/rank.h"

namespace tide::sched {

const std::vector<RunningJob> ScheduleInput::kNoRunning;
const std::map<std::string, AccountShare> ScheduleInput::kNoAccounts;
const SchedulerConfig ScheduleInput::kDefaultConfig;

const char* TierName(Tier t) { return t == Tier::kSpot ? "spot" : "on-demand"; }

const char* PolicyName(Policy p) {
  switch (p) {
    case Policy::kFifo: return "fifo";
    case Policy::kFair: return "fair";
    case Policy::kTide: return "tide";
    case Policy::kSjfOracle: return "sjf-oracle";
  }
  return "?";
}

bool ParsePolicy(const std::string& name, Policy* out) {
  for (Policy p : {Policy::kFifo, Policy::kFair, Policy::kTide, Policy::kSjfOracle}) {
    if (name == PolicyName(p)) {
      *out = p;
      return true;
    }
  }
  return false;
}

const char* WaitKindName(WaitKind k) {
  switch (k) {
    case WaitKind::kUnsatisfiable: return "unsatisfiable";
    case WaitKind::kResources: return "resources";
    case WaitKind::kBehind: return "behind";
    case WaitKind::kPreempting: return "preempting";
    case WaitKind::kPrice: return "price";
  }
  return "?";
}

namespace {

constexpr int64_t kNever = INT64_MAX;

uint64_t Fnv(uint64_t seed, const std::string& s) { return Fnv1a(seed, s); }

// Something that holds GPUs on a node: a running job or one placed in this
// pass.
struct Occupant {
  int64_t end = kNever;  // kNever: unknown
  std::vector<int> gpus;  // indices on the node
  int running = -1;       // index into in.running, -1 if placed in this pass
};

// Working state of one pass.
class Pass {
 public:
  explicit Pass(const ScheduleInput& in) : in_(in), cfg_(in.config) {}
  Plan Run();

 private:
  // Nodes usable by one feasibility shape (GPU types and memory, labels,
  // price cap, host size), bucketed by how many matching GPUs are free.
  // Buckets hold preference ranks, so the first of a bucket is the cheapest,
  // most reliable node of that fill level.
  struct ShapeIndex {
    PendingJob proto;
    std::vector<int16_t> usable;  // per node: matching GPUs in all, 0 = unusable
    std::vector<int16_t> free;    // per node: matching GPUs free now
    std::vector<std::set<uint32_t>> buckets;  // free count -> pref ranks
    std::vector<std::set<uint32_t>> held;     // the same for held nodes
  };

  ShapeIndex& Shape(const PendingJob& job, uint32_t* id);
  uint32_t Text(std::string text);
  int CountFree(const PendingJob& proto, size_t node) const;
  void Refresh(size_t node);
  void Hold(size_t node, uint32_t holder);
  bool HostRoom(const PendingJob& job, size_t node) const;
  bool MayBackfill(const PendingJob& job, size_t node) const;
  // Best-fit nodes for `job` now; empty if none. *capacity is false when
  // too few nodes have the GPUs free at all (reservations aside).
  std::vector<size_t> Select(const PendingJob& job, ShapeIndex& s, bool* capacity);
  void Place(uint32_t qi, const std::vector<size_t>& nodes, ShapeIndex& s);
  // Tries to make room by stopping lower-ranked work; true if it did (or
  // stopping work already will).
  bool Preempt(uint32_t qi, ShapeIndex& s, PendingInfo* info);
  bool Reserve(uint32_t qi, ShapeIndex& s, PendingInfo* info);
  int64_t FreeAt(const PendingJob& job, size_t node) const;
  bool VictimFor(const PendingJob& job, int job_level, const RunningJob& r) const;

  const ScheduleInput& in_;
  const SchedulerConfig& cfg_;
  Plan plan_;
  std::vector<uint32_t> pref_;       // node index -> preference rank
  std::vector<size_t> by_pref_;      // preference rank -> node index
  std::vector<std::vector<GpuSlot>> gpus_;  // working copy: free flags change
  std::vector<std::vector<int>> gpu_pos_;   // GPU index -> position on node
  std::vector<double> cpus_free_;
  std::vector<int64_t> mem_free_;
  std::vector<std::vector<Occupant>> occupants_;
  std::vector<int64_t> reserved_from_;  // kNever = no reservation
  std::vector<int> held_by_;            // queue index of the holder, -1 none
  std::vector<bool> stopping_;          // per running job
  std::vector<int> running_level_;
  bool spot_running_ = false;         // some running spot job could be a victim
  bool preemptible_running_ = false;  // some running job may yield its level
  bool stopping_running_ = false;     // some running job is being stopped
  std::vector<std::unique_ptr<ShapeIndex>> shapes_;
  std::unordered_multimap<uint64_t, uint32_t> shape_ids_;
  std::unordered_map<std::string, size_t> node_index_;
  int max_gpus_ = 0;
};

// Jobs of one feasibility shape see the same usable nodes.
uint64_t ShapeHash(const PendingJob& j) {
  uint64_t h = Fnv(static_cast<uint64_t>(j.gpu_memory_mb) * 31 + static_cast<uint64_t>(j.max_price),
                   "");
  h = (h ^ static_cast<uint64_t>(j.cpus * 1000)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(j.memory_mb)) * 1099511628211ull;
  for (const auto& t : j.gpu_types) h = Fnv(h, t);
  for (const auto& [a, b] : j.constraints) h = Fnv(Fnv(h, a), b);
  h = Fnv(h, j.image);
  return h;
}

bool SameShape(const PendingJob& a, const PendingJob& b) {
  return a.gpu_memory_mb == b.gpu_memory_mb && a.max_price == b.max_price && a.cpus == b.cpus &&
         a.memory_mb == b.memory_mb && a.gpu_types == b.gpu_types && a.constraints == b.constraints &&
         a.image == b.image;
}


Pass::ShapeIndex& Pass::Shape(const PendingJob& job, uint32_t* id) {
  uint64_t h = ShapeHash(job);
  auto range = shape_ids_.equal_range(h);
  for (auto it = range.first; it != range.second; ++it) {
    if (SameShape(shapes_[it->second]->proto, job)) {
      *id = it->second;
      return *shapes_[it->second];
    }
  }
  *id = static_cast<uint32_t>(shapes_.size());
  shape_ids_.emplace(h, *id);
  shapes_.push_back(std::make_unique<ShapeIndex>());
  ShapeIndex& s = *shapes_.back();
  s.proto = job;
  s.proto.gpu_count = 1;
  s.proto.nodes = 1;
  const size_t n = in_.nodes.size();
  s.usable.assign(n, 0);
  s.free.assign(n, 0);
  s.buckets.resize(static_cast<size_t>(max_gpus_) + 1);
  s.held.resize(static_cast<size_t>(max_gpus_) + 1);
  for (size_t i = 0; i < n; ++i) {
    s.usable[i] = static_cast<int16_t>(UsableGpus(s.proto, in_.nodes[i]));
    if (s.usable[i] == 0) continue;
    s.free[i] = static_cast<int16_t>(CountFree(s.proto, i));
    (held_by_[i] >= 0 ? s.held : s.buckets)[static_cast<size_t>(s.free[i])].insert(pref_[i]);
  }
  return s;
}

int Pass::CountFree(const PendingJob& proto, size_t node) const {
  int f = 0;
  for (const auto& g : gpus_[node]) f += (g.free && GpuMatches(proto, g)) ? 1 : 0;
  return f;
}

// A node's free GPUs or hold changed: move it in every shape index.
void Pass::Refresh(size_t node) {
  for (auto& sp : shapes_) {
    ShapeIndex& s = *sp;
    if (s.usable[node] == 0) continue;
    auto old = static_cast<size_t>(s.free[node]);
    s.buckets[old].erase(pref_[node]);
    s.held[old].erase(pref_[node]);
    s.free[node] = static_cast<int16_t>(CountFree(s.proto, node));
    auto now = static_cast<size_t>(s.free[node]);
    (held_by_[node] >= 0 ? s.held : s.buckets)[now].insert(pref_[node]);
  }
}

void Pass::Hold(size_t node, uint32_t holder) {
  if (held_by_[node] >= 0) return;
  held_by_[node] = static_cast<int>(holder);
  Refresh(node);
}

bool Pass::HostRoom(const PendingJob& job, size_t node) const {
  const NodeView& v = in_.nodes[node];
  if (job.cpus > 0 && v.cpus > 0 && cpus_free_[node] + 1e-9 < job.cpus) return false;
  if (job.memory_mb > 0 && v.memory_mb > 0 && mem_free_[node] < job.memory_mb) return false;
  return true;
}

bool Pass::MayBackfill(const PendingJob& job, size_t node) const {
  if (reserved_from_[node] == kNever) return true;
  return job.max_runtime_ms > 0 && in_.now_ms + job.max_runtime_ms <= reserved_from_[node];
}

// The cheapest node that can take the job now; among equally cheap ones
// the best fit (the fewest free matching GPUs that still fit), then the
// rest of the preference order. A gang takes its nodes one at a time so.
// Buckets hold nodes by free GPUs, each in preference order, which is
// price first: a bucket is left at its first node dearer than the best.
// Under PlacementOrder::kPackFirst the first bucket with a node that can take
// the job wins (best fit, then price).
std::vector<size_t> Pass::Select(const PendingJob& job, ShapeIndex& s, bool* capacity) {
  std::vector<size_t> chosen;
  auto taken = [&](size_t node) {
    return std::find(chosen.begin(), chosen.end(), node) != chosen.end();
  };
  while (static_cast<int>(chosen.size()) < job.nodes) {
    size_t best = SIZE_MAX;
    for (size_t f = static_cast<size_t>(job.gpu_count); f < s.buckets.size(); ++f) {
      for (uint32_t rank : s.buckets[f]) {
        size_t node = by_pref_[rank];
        if (best != SIZE_MAX && in_.nodes[node].price >= in_.nodes[best].price) break;
        if (taken(node) || !HostRoom(job, node) || !MayBackfill(job, node)) continue;
        best = node;
        break;
      }
      if (best != SIZE_MAX && cfg_.placement == PlacementOrder::kPackFirst) break;
    }
    if (best == SIZE_MAX) break;
    chosen.push_back(best);
  }
  if (static_cast<int>(chosen.size()) == job.nodes) {
    *capacity = true;
    return chosen;
  }
  // Not now: is it for want of GPUs and host room, or only reservations?
  int roomy = 0;
  for (size_t f = static_cast<size_t>(job.gpu_count); f < s.buckets.size(); ++f) {
    for (uint32_t rank : s.buckets[f]) roomy += HostRoom(job, by_pref_[rank]) ? 1 : 0;
  }
  *capacity = roomy >= job.nodes;
  return {};
}

void Pass::Place(uint32_t qi, const std::vector<size_t>& nodes, ShapeIndex& s) {
  const PendingJob& job = in_.queue[qi];
  Placement p{job.id, {}};
  int64_t end = job.max_runtime_ms > 0 ? in_.now_ms + job.max_runtime_ms : kNever;
  for (size_t node : nodes) {
    NodeAlloc a{in_.nodes[node].id, {}};
    for (auto& g : gpus_[node]) {
      if (static_cast<int>(a.gpus.size()) == job.gpu_count) break;
      if (g.free && GpuMatches(job, g)) {
        g.free = false;
        a.gpus.push_back(g.index);
      }
    }
    std::sort(a.gpus.begin(), a.gpus.end());
    cpus_free_[node] -= job.cpus;
    mem_free_[node] -= job.memory_mb;
    occupants_[node].push_back({end, a.gpus, -1});
    p.allocs.push_back(std::move(a));
    Refresh(node);
  }
  plan_.placements.push_back(std::move(p));
}

// When `node` is expected to have the job's GPUs free: the running work on
// it ends in order of expected end. kNever if that depends on an unknown end.
int64_t Pass::FreeAt(const PendingJob& job, size_t node) const {
  int free = 0;
  for (const auto& g : gpus_[node]) free += (g.free && GpuMatches(job, g)) ? 1 : 0;
  if (free >= job.gpu_count) return in_.now_ms;
  std::vector<std::pair<int64_t, int>> ends;
  for (const auto& o : occupants_[node]) {
    int matching = 0;
    for (int idx : o.gpus) {
      int pos = idx < static_cast<int>(gpu_pos_[node].size()) ? gpu_pos_[node][idx] : -1;
      if (pos >= 0 && GpuMatches(job, gpus_[node][static_cast<size_t>(pos)])) ++matching;
    }
    if (matching > 0) ends.push_back({o.end, matching});
  }
  std::sort(ends.begin(), ends.end());
  for (auto& [end, n] : ends) {
    if (end == kNever) return kNever;
    free += n;
    if (free >= job.gpu_count) return std::max(end, in_.now_ms);
  }
  return kNever;
}

bool Pass::VictimFor(const PendingJob& job, int job_level, const RunningJob& r) const {
  if (r.tier == Tier::kSpot && job.tier == Tier::kOnDemand) return true;
  if (cfg_.policy != Policy::kTide || !r.preemptible) return false;
  if (in_.now_ms - job.queued_since < cfg_.las_preempt_after_ms) return false;
  if (static_cast<int>(r.tier) < static_cast<int>(job.tier)) return false;
  return ServiceLevel(r.attained_gpu_s, cfg_) > job_level;
}

bool Pass::Preempt(uint32_t qi, ShapeIndex& s, PendingInfo* info) {
  const PendingJob& job = in_.queue[qi];
  bool tier_victims = job.tier == Tier::kOnDemand && spot_running_;
  bool level_victims = cfg_.policy == Policy::kTide && preemptible_running_;
  if (!tier_victims && !level_victims && !stopping_running_) return false;
  int level = cfg_.policy == Policy::kTide ? PendingLevel(job, cfg_, in_.now_ms) : 0;
  // Per usable node: GPUs free now plus those of work already stopping, and
  // the victims that would have to stop on top, best victims first.
  struct Option {
    size_t node;
    int victims;
    std::vector<int> chosen;  // running indices
  };
  std::vector<Option> soon;     // enough once stopping work is gone
  std::vector<Option> options;  // enough with new victims
  // Which running job is the better victim: spot first, then lower
  // priority, higher service level, the most recent checkpoint (it loses
  // least by stopping) and the latest start.
  auto victim_before = [&](int a, int b) {
    const RunningJob& x = in_.running[static_cast<size_t>(a)];
    const RunningJob& y = in_.running[static_cast<size_t>(b)];
    if (x.tier != y.tier) return x.tier > y.tier;
    if (x.priority != y.priority) return x.priority < y.priority;
    int lx = running_level_[static_cast<size_t>(a)];
    int ly = running_level_[static_cast<size_t>(b)];
    if (lx != ly) return lx > ly;
    if (x.last_checkpoint != y.last_checkpoint) return x.last_checkpoint > y.last_checkpoint;
    if (x.started_at != y.started_at) return x.started_at > y.started_at;
    return x.id < y.id;
  };
  for (size_t node = 0; node < in_.nodes.size(); ++node) {
    if (s.usable[node] < job.gpu_count || held_by_[node] >= 0) continue;
    // A node reserved for a job ranked ahead is not this job's to take.
    if (reserved_from_[node] != kNever) continue;
    if (s.free[node] >= job.gpu_count) {
      // Free already (a gang's other nodes may still need victims).
      if (job.nodes > 1 && HostRoom(job, node)) options.push_back({node, 0, {}});
      continue;
    }
    int have = s.free[node];
    std::vector<std::pair<int, int>> cands;  // (running index, matching GPUs)
    for (const auto& o : occupants_[node]) {
      if (o.running < 0) continue;
      int matching = 0;
      for (int idx : o.gpus) {
        int pos = idx < static_cast<int>(gpu_pos_[node].size()) ? gpu_pos_[node][idx] : -1;
        if (pos >= 0 && GpuMatches(job, gpus_[node][static_cast<size_t>(pos)])) ++matching;
      }
      if (matching == 0) continue;
      if (stopping_[static_cast<size_t>(o.running)]) {
        have += matching;
      } else if (VictimFor(job, level, in_.running[static_cast<size_t>(o.running)])) {
        cands.push_back({o.running, matching});
      }
    }
    if (have >= job.gpu_count) {
      soon.push_back({node, 0, {}});
      continue;
    }
    std::sort(cands.begin(), cands.end(),
              [&](const auto& a, const auto& b) { return victim_before(a.first, b.first); });
    // Fewest victims first: k, the least number whose largest members
    // cover the need; then the best k in preference order that still can.
    std::vector<int> sizes;
    for (auto& c : cands) sizes.push_back(c.second);
    std::sort(sizes.rbegin(), sizes.rend());
    int need = job.gpu_count - have, k = 0, covered = 0;
    while (covered < need && k < static_cast<int>(sizes.size())) covered += sizes[static_cast<size_t>(k++)];
    if (covered < need) continue;
    Option opt{node, 0, {}};
    for (size_t i = 0; i < cands.size() && need > 0; ++i) {
      // Could the other picks still cover the rest if this one is taken?
      int rest = need - cands[i].second, slots = k - opt.victims - 1, best = 0;
      std::vector<int> others;
      for (size_t o = i + 1; o < cands.size(); ++o) others.push_back(cands[o].second);
      std::sort(others.rbegin(), others.rend());
      for (int s2 = 0; s2 < slots && s2 < static_cast<int>(others.size()); ++s2) best += others[static_cast<size_t>(s2)];
      if (rest > 0 && best < rest) continue;
      need -= cands[i].second;
      opt.chosen.push_back(cands[i].first);
      ++opt.victims;
    }
    if (need <= 0) options.push_back(std::move(opt));
  }
  // Fewest victims, then the better victims (each option's are in
  // preference order), then the better node.
  auto better = [&](const Option& a, const Option& b) {
    if (a.victims != b.victims) return a.victims < b.victims;
    for (size_t i = 0; i < a.chosen.size() && i < b.chosen.size(); ++i) {
      if (a.chosen[i] == b.chosen[i]) continue;
      if (victim_before(a.chosen[i], b.chosen[i])) return true;
      if (victim_before(b.chosen[i], a.chosen[i])) return false;
    }
    return pref_[a.node] < pref_[b.node];
  };
  if (static_cast<int>(soon.size()) >= job.nodes) {
    std::sort(soon.begin(), soon.end(), better);
    for (int i = 0; i < job.nodes; ++i) Hold(soon[static_cast<size_t>(i)].node, qi);
    info->kind = WaitKind::kPreempting;
    info->text = Text("waiting for preempted work to stop on " +
                      std::string(job.nodes == 1 ? "its node" : "its nodes"));
    return true;
  }
  if (static_cast<int>(soon.size() + options.size()) < job.nodes) return false;
  std::sort(options.begin(), options.end(), better);
  std::sort(soon.begin(), soon.end(), better);
  std::set<int> victims;
  size_t taken_soon = soon.size();
  for (size_t i = 0; i + taken_soon < static_cast<size_t>(job.nodes); ++i) {
    victims.insert(options[i].chosen.begin(), options[i].chosen.end());
  }
  if (victims.empty() && taken_soon == 0) return false;  // nothing to stop
  for (auto& o : soon) Hold(o.node, qi);
  for (size_t i = 0; i + taken_soon < static_cast<size_t>(job.nodes); ++i) Hold(options[i].node, qi);
  for (int ri : victims) {
    stopping_[static_cast<size_t>(ri)] = true;
    plan_.preemptions.push_back({in_.running[static_cast<size_t>(ri)].id, job.id});
  }
  info->kind = WaitKind::kPreempting;
  info->text = Text("preempting " + std::to_string(victims.size()) + " lower-ranked " +
                    (victims.size() == 1 ? "job" : "jobs") + " to start");
  return true;
}

bool Pass::Reserve(uint32_t qi, ShapeIndex& s, PendingInfo* info) {
  const PendingJob& job = in_.queue[qi];
  // (free at, GPUs still missing, pref rank): earliest first; where ends
  // are unknown, the node closest to fitting.
  std::vector<std::tuple<int64_t, int, uint32_t>> starts;
  for (size_t node = 0; node < in_.nodes.size(); ++node) {
    if (s.usable[node] < job.gpu_count || held_by_[node] >= 0) continue;
    if (reserved_from_[node] != kNever) continue;  // one reservation a node
    starts.emplace_back(FreeAt(job, node), job.gpu_count - s.free[node], pref_[node]);
  }
  if (static_cast<int>(starts.size()) < job.nodes) return false;
  std::sort(starts.begin(), starts.end());
  Reservation r{job.id, 0, {}};
  int64_t at = std::get<0>(starts[static_cast<size_t>(job.nodes - 1)]);
  // An unknown end cannot be planned around: hold the nodes outright.
  int64_t from = at == kNever ? in_.now_ms : at;
  r.start = at == kNever ? 0 : at;
  for (int i = 0; i < job.nodes; ++i) {
    size_t node = by_pref_[std::get<2>(starts[static_cast<size_t>(i)])];
    reserved_from_[node] = from;
    r.node_ids.push_back(in_.nodes[node].id);
  }
  info->reserved_start = r.start;
  plan_.reservations.push_back(std::move(r));
  return true;
}

Plan Pass::Run() {
  const size_t n = in_.nodes.size();
  // Node preference: cheaper first, then more reliable, then a seeded hash
  // (spreads ties without favouring low ids), then id.
  by_pref_.resize(n);
  for (size_t i = 0; i < n; ++i) by_pref_[i] = i;
  std::vector<uint64_t> tie(n);
  for (size_t i = 0; i < n; ++i) tie[i] = Fnv(cfg_.seed, in_.nodes[i].id);
  std::sort(by_pref_.begin(), by_pref_.end(), [&](size_t a, size_t b) {
    const NodeView& x = in_.nodes[a];
    const NodeView& y = in_.nodes[b];
    if (x.price != y.price) return x.price < y.price;
    if (x.reliability != y.reliability) return x.reliability > y.reliability;
    if (tie[a] != tie[b]) return tie[a] < tie[b];
    return x.id < y.id;
  });
  pref_.resize(n);
  for (size_t r = 0; r < n; ++r) pref_[by_pref_[r]] = static_cast<uint32_t>(r);
  gpus_.resize(n);
  gpu_pos_.resize(n);
  cpus_free_.resize(n);
  mem_free_.resize(n);
  occupants_.assign(n, {});
  reserved_from_.assign(n, kNever);
  held_by_.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    const NodeView& v = in_.nodes[i];
    node_index_[v.id] = i;
    gpus_[i] = v.gpus;
    max_gpus_ = std::max(max_gpus_, static_cast<int>(v.gpus.size()));
    for (size_t p = 0; p < v.gpus.size(); ++p) {
      int idx = v.gpus[p].index;
      if (idx < 0 || idx > 4096) continue;
      if (static_cast<int>(gpu_pos_[i].size()) <= idx) gpu_pos_[i].resize(idx + 1, -1);
      gpu_pos_[i][static_cast<size_t>(idx)] = static_cast<int>(p);
    }
    cpus_free_[i] = v.cpus_free;
    mem_free_[i] = v.memory_free_mb;
  }
  stopping_.assign(in_.running.size(), false);
  running_level_.resize(in_.running.size());
  for (size_t r = 0; r < in_.running.size(); ++r) {
    const RunningJob& job = in_.running[r];
    stopping_[r] = job.stopping;
    running_level_[r] = ServiceLevel(job.attained_gpu_s, cfg_);
    spot_running_ = spot_running_ || (job.tier == Tier::kSpot && !job.stopping);
    preemptible_running_ = preemptible_running_ || (job.preemptible && !job.stopping);
    stopping_running_ = stopping_running_ || job.stopping;
    int64_t end = job.expected_end > 0 ? job.expected_end : kNever;
    if (end == kNever && cfg_.default_runtime_ms > 0) {
      end = std::max(in_.now_ms, job.started_at + cfg_.default_runtime_ms);
    }
    for (const auto& a : job.allocs) {
      auto it = node_index_.find(a.node_id);
      if (it != node_index_.end()) {
        occupants_[it->second].push_back({end, a.gpus, static_cast<int>(r)});
      }
    }
  }

  plan_.ranked = Rank(in_);
  // Outcomes that stay the same for the rest of the pass: GPUs are only
  // taken within a pass, never freed, so a job shape that could never run,
  // or found too few nodes with room and no victims, finds the same again.
  // This keeps a long queue of alike jobs linear.
  auto memo_key = [](uint32_t shape, const PendingJob& j, int level) {
    return (static_cast<uint64_t>(shape) << 32) ^ (static_cast<uint64_t>(j.nodes) << 20) ^
           (static_cast<uint64_t>(j.gpu_count) << 8) ^ (static_cast<uint64_t>(j.tier) << 6) ^
           static_cast<uint64_t>(std::min(level, 63));
  };
  std::unordered_map<uint64_t, std::pair<WaitKind, uint32_t>> never;  // shape+size -> why
  std::unordered_map<uint64_t, std::pair<WaitKind, uint32_t>> full;   // + tier, level
  std::unordered_map<uint64_t, std::pair<int64_t, uint32_t>> reserved_out;  // -> shortest runtime kept out
  // "The free GPUs are reserved" texts, one per shape and kind of job.
  std::unordered_map<std::string, uint32_t> reserved_texts;
  auto ReservedText = [&](const PendingJob& job) {
    std::string text = "the free " + Describe(job) + " are reserved for jobs ranked ahead; " +
                       (job.max_runtime_ms > 0 ? "it would end after their reservation"
                                               : "set max_runtime to let it backfill");
    auto it = reserved_texts.find(text);
    if (it == reserved_texts.end()) it = reserved_texts.emplace(text, Text(text)).first;
    return it->second;
  };
  int waiting = 0;
  int reservations = 0;
  for (uint32_t qi : plan_.ranked) {
    const PendingJob& job = in_.queue[qi];
    uint32_t shape_id = 0;
    ShapeIndex& s = Shape(job, &shape_id);
    PendingInfo info;
    info.job = qi;
    uint64_t sized = memo_key(shape_id, job, 0) | (1ull << 7);
    auto nv = never.find(sized);
    if (nv == never.end()) {
      WaitKind kind;
      std::string why = Unsatisfiable(job, in_.nodes, &kind);
      uint32_t text = why.empty() ? UINT32_MAX : Text(std::move(why));
      nv = never.emplace(sized, std::make_pair(kind, text)).first;
    }
    if (nv->second.second != UINT32_MAX) {
      info.kind = nv->second.first;
      info.text = nv->second.second;
      plan_.pending.push_back(info);
      continue;  // cannot run anywhere: it holds nothing back
    }
    int level = cfg_.policy == Policy::kTide ? PendingLevel(job, cfg_, in_.now_ms) : 0;
    // Whether it has waited long enough to preempt for its level changes
    // what it may do, so it is part of the memo.
    bool waited = in_.now_ms - job.queued_since >= cfg_.las_preempt_after_ms;
    uint64_t memo = memo_key(shape_id, job, level) ^ (waited ? (1ull << 62) : 0);
    // Blocked only by reservations ahead: so is every later job of the
    // shape that would run at least as long.
    const int64_t runtime = job.max_runtime_ms > 0 ? job.max_runtime_ms : INT64_MAX;
    auto behind = reserved_out.find(memo);
    if (behind != reserved_out.end() && runtime >= behind->second.first) {
      info.position = ++waiting;
      info.kind = WaitKind::kBehind;
      info.text = ReservedText(job);
      if (reservations < cfg_.max_reservations && Reserve(qi, s, &info)) ++reservations;
      plan_.pending.push_back(info);
      continue;
    }
    auto known = full.find(memo);
    if (known != full.end()) {
      info.position = ++waiting;
      info.kind = known->second.first;
      info.text = known->second.second;
      if (cfg_.backfill && reservations < cfg_.max_reservations && Reserve(qi, s, &info)) {
        ++reservations;
      }
      plan_.pending.push_back(info);
      continue;
    }
    bool capacity = false;
    std::vector<size_t> chosen = Select(job, s, &capacity);
    if (!chosen.empty()) {
      Place(qi, chosen, s);
      continue;
    }
    info.position = ++waiting;
    if (cfg_.preemption && Preempt(qi, s, &info)) {
      plan_.pending.push_back(info);
      continue;
    }
    // Would it fit if nothing were held for jobs ahead?
    int held_holder = -1;
    for (size_t f = static_cast<size_t>(job.gpu_count); f < s.held.size() && held_holder < 0;
         ++f) {
      for (uint32_t rank : s.held[f]) {
        size_t node = by_pref_[rank];
        if (!HostRoom(job, node)) continue;
        held_holder = held_by_[node];
        break;
      }
    }
    if (capacity) {
      info.kind = WaitKind::kBehind;
      info.text = ReservedText(job);
    } else if (held_holder >= 0) {
      info.kind = WaitKind::kBehind;
      info.text = Text("behind " + in_.queue[static_cast<size_t>(held_holder)].id +
                       ", which ranks ahead (tier, fair share, priority or submit time) and "
                       "holds the free " + Describe(job));
    } else {
      info.kind = WaitKind::kResources;
      info.text = Text("waiting for " + Describe(job) + " to be free" +
                       (job.nodes == 1 ? " on one node" : ""));
    }
    if (!cfg_.backfill) {
      // Strict order: nothing ranked after it may take its nodes.
      for (size_t node = 0; node < n; ++node) {
        if (s.usable[node] >= job.gpu_count) Hold(node, qi);
      }
    } else if (reservations < cfg_.max_reservations && Reserve(qi, s, &info)) {
      ++reservations;
    }
    if (!capacity) {
      full.emplace(memo, std::make_pair(info.kind, info.text));
    } else {
      auto& r = reserved_out[memo];
      if (r.first == 0 || runtime < r.first) r = {runtime, info.text};
    }
    plan_.pending.push_back(info);
  }
  for (size_t node = 0; node < n; ++node) {
    if (held_by_[node] >= 0 || reserved_from_[node] != kNever) plan_.claimed.push_back(in_.nodes[node].id);
  }
  return std::move(plan_);
}

uint32_t Pass::Text(std::string text) {
  plan_.texts.push_back(std::move(text));
  return static_cast<uint32_t>(plan_.texts.size() - 1);
}

}  // namespace

Plan Schedule(const ScheduleInput& in) { return Pass(in).Run(); }

std::string PendingReason(const Plan& plan, const PendingInfo& info) {
  const std::string& base = plan.texts.at(info.text);
  int ahead = info.position - 1;
  if (info.kind != WaitKind::kResources || ahead <= 0) return base;
  return base + "; " + std::to_string(ahead) + (ahead == 1 ? " job" : " jobs") + " ahead";
}

}  // namespace tide::sched
