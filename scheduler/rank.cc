#include "scheduler/rank.h"

#include <algorithm>
#include <queue>
#include <string>
#include <unordered_map>

namespace tide::sched {

int ServiceLevel(int64_t attained_gpu_s, const SchedulerConfig& config) {
  int level = 0;
  for (int64_t t : config.las_thresholds_gpu_s) {
    if (attained_gpu_s >= t) ++level;
  }
  return level;
}

int PendingLevel(const PendingJob& job, const SchedulerConfig& config, int64_t now_ms) {
  int level = ServiceLevel(job.attained_gpu_s, config);
  if (level > 0 && config.starvation_factor > 0 && job.last_run_ms > 0) {
    auto limit = std::max<int64_t>(config.starvation_min_ms,
                                   static_cast<int64_t>(config.starvation_factor *
                                                        static_cast<double>(job.last_run_ms)));
    if (now_ms - job.queued_since >= limit) level = 0;
  }
  return level;
}

namespace {

struct Key {
  int tier;
  int level;
  int64_t duration;  // sjf-oracle
  int priority;
  int64_t submitted_at;
  const std::string* id;
};

bool Before(const Key& a, const Key& b) {
  if (a.tier != b.tier) return a.tier < b.tier;
  if (a.level != b.level) return a.level < b.level;
  if (a.duration != b.duration) return a.duration < b.duration;
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.submitted_at != b.submitted_at) return a.submitted_at < b.submitted_at;
  return *a.id < *b.id;
}

}  // namespace

std::vector<uint32_t> Rank(const ScheduleInput& in) {
  const auto& cfg = in.config;
  const size_t n = in.queue.size();
  std::vector<Key> keys(n);
  for (size_t i = 0; i < n; ++i) {
    const PendingJob& j = in.queue[i];
    Key& k = keys[i];
    k.tier = static_cast<int>(j.tier);
    k.level = cfg.policy == Policy::kTide ? PendingLevel(j, cfg, in.now_ms) : 0;
    k.duration = cfg.policy == Policy::kSjfOracle ? j.oracle_duration_ms : 0;
    bool prio = cfg.policy == Policy::kFair || cfg.policy == Policy::kTide;
    k.priority = prio ? j.priority : 0;
    k.submitted_at = j.submitted_at;
    k.id = &j.id;
  }
  std::vector<uint32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return Before(keys[a], keys[b]); });
  if (cfg.policy != Policy::kFair && cfg.policy != Policy::kTide) return order;

  // Progressive filling between accounts. Within an account the sorted
  // order stands; across accounts, among the heads of equal tier and level,
  // the account with the lowest score goes next.
  struct Account {
    double score = 0;
    double weight = 1;
    std::vector<uint32_t> jobs;  // in order
    size_t next = 0;
  };
  std::unordered_map<std::string, Account> accounts;
  for (uint32_t i : order) accounts[in.queue[i].account].jobs.push_back(i);
  std::unordered_map<std::string, double> running_gpus;
  for (const auto& r : in.running) {
    double g = 0;
    for (const auto& a : r.allocs) g += static_cast<double>(a.gpus.size());
    running_gpus[r.account] += g;
  }
  for (auto& [name, a] : accounts) {
    auto share = in.accounts.find(name);
    double usage = 0;
    if (share != in.accounts.end()) {
      a.weight = share->second.weight > 0 ? share->second.weight : 1;
      usage = share->second.usage_gpu_s;
    }
    a.score = FairShareScore(usage, running_gpus[name], a.weight);
  }
  struct Head {
    int tier, level;
    double score;
    const std::string* account;
  };
  auto worse = [](const Head& a, const Head& b) {  // priority_queue: top is best
    if (a.tier != b.tier) return a.tier > b.tier;
    if (a.level != b.level) return a.level > b.level;
    if (a.score != b.score) return a.score > b.score;
    return *a.account > *b.account;
  };
  std::priority_queue<Head, std::vector<Head>, decltype(worse)> heads(worse);
  auto push = [&](const std::string& name, Account& a) {
    if (a.next == a.jobs.size()) return;
    const Key& k = keys[a.jobs[a.next]];
    heads.push({k.tier, k.level, a.score, &name});
  };
  for (auto& [name, a] : accounts) push(name, a);
  std::vector<uint32_t> out;
  out.reserve(n);
  while (!heads.empty()) {
    Head h = heads.top();
    heads.pop();
    Account& a = accounts.at(*h.account);
    uint32_t j = a.jobs[a.next++];
    out.push_back(j);
    const PendingJob& job = in.queue[j];
    a.score += kFairShareHorizonS * job.nodes * job.gpu_count / a.weight;
    push(*h.account, a);
  }
  return out;
}

}  // namespace tide::sched
