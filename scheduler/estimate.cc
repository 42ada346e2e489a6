#include "scheduler/estimate.h"

#include <algorithm>
#include <climits>

#include "scheduler/schedule.h"

namespace tide::sched {

std::unordered_map<std::string, int64_t> ExpectedStarts(const ScheduleInput& in,
                                                        const EstimateOptions& options) {
  std::unordered_map<std::string, int64_t> starts;
  std::vector<NodeView> nodes = in.nodes;
  std::vector<PendingJob> queue = in.queue;
  std::vector<RunningJob> running = in.running;
  std::unordered_map<std::string, size_t> node_index;
  for (size_t i = 0; i < nodes.size(); ++i) node_index[nodes[i].id] = i;
  // Unknown ends: the stand-in run time from the start, or from now for
  // work that has already run longer than that.
  for (auto& r : running) {
    if (r.expected_end > 0) continue;
    r.expected_end = r.started_at + options.default_runtime_ms;
    if (r.expected_end <= in.now_ms) r.expected_end = in.now_ms + options.default_runtime_ms;
  }
  auto end_of = [](const RunningJob& r) { return r.expected_end; };
  auto set_free = [&](const RunningJob& r, bool free) {
    for (const auto& a : r.allocs) {
      auto it = node_index.find(a.node_id);
      if (it == node_index.end()) continue;
      for (auto& g : nodes[it->second].gpus) {
        if (std::find(a.gpus.begin(), a.gpus.end(), g.index) != a.gpus.end()) g.free = free;
      }
    }
  };
  // Work already being stopped is gone in the what-if.
  std::erase_if(running, [&](const RunningJob& r) {
    if (r.stopping) set_free(r, true);
    return r.stopping;
  });
  SchedulerConfig cfg = in.config;
  int64_t now = in.now_ms;
  for (int step = 0; step < options.max_steps && !queue.empty(); ++step) {
    Plan plan = Schedule({nodes, queue, running, in.accounts, cfg, now});
    std::unordered_map<std::string, const Placement*> placed;
    for (const auto& p : plan.placements) placed[p.job_id] = &p;
    std::vector<PendingJob> left;
    for (auto& j : queue) {
      auto it = placed.find(j.id);
      if (it == placed.end()) {
        left.push_back(std::move(j));
        continue;
      }
      starts[j.id] = now;
      RunningJob r;
      r.id = j.id;
      r.account = j.account;
      r.tier = j.tier;
      r.priority = j.priority;
      r.allocs = it->second->allocs;
      r.started_at = now;
      r.expected_end = now + (j.max_runtime_ms > 0 ? j.max_runtime_ms : options.default_runtime_ms);
      set_free(r, false);
      running.push_back(std::move(r));
    }
    queue = std::move(left);
    // Preempted work stops now and waits again.
    for (const auto& pre : plan.preemptions) {
      auto it = std::find_if(running.begin(), running.end(),
                             [&](const RunningJob& r) { return r.id == pre.victim_id; });
      if (it == running.end()) continue;
      set_free(*it, true);
      running.erase(it);
    }
    if (!plan.preemptions.empty()) continue;  // same instant, freed GPUs
    // Next: the earliest end after now.
    int64_t next = INT64_MAX;
    for (const auto& r : running) next = std::min(next, std::max(end_of(r), now + 1));
    if (next == INT64_MAX) break;  // nothing will free up: the rest cannot start
    now = next;
    std::erase_if(running, [&](const RunningJob& r) {
      bool done = std::max(end_of(r), r.started_at + 1) <= now;
      if (done) set_free(r, true);
      return done;
    });
  }
  return starts;
}

}  // namespace tide::sched
