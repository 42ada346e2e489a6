#include "scheduler/schedule.h"

#include <algorithm>
#include <set>

namespace tide::sched {

namespace {

bool GpuMatches(const PendingJob& job, const GpuSlot& gpu) {
  if (job.gpu_memory_mb > 0 && gpu.memory_mb < job.gpu_memory_mb) return false;
  if (job.gpu_types.empty()) return true;
  return std::find(job.gpu_types.begin(), job.gpu_types.end(), gpu.model) != job.gpu_types.end();
}

// GPUs of `node` the job could ever use, and how many of them are free now.
struct Fit {
  int usable = 0;
  int free = 0;
};

Fit FitOn(const PendingJob& job, const NodeView& node) {
  Fit fit;
  for (const auto& g : node.gpus) {
    if (!GpuMatches(job, g)) continue;
    ++fit.usable;
    if (g.free) ++fit.free;
  }
  return fit;
}

std::string Join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// "2 RTX4090 GPUs", "1 GPU with at least 24GB", ...
std::string Describe(const PendingJob& job) {
  std::string what = std::to_string(job.gpu_count) + " ";
  if (!job.gpu_types.empty()) what += Join(job.gpu_types, "|") + " ";
  what += job.gpu_count == 1 ? "GPU" : "GPUs";
  if (job.gpu_memory_mb > 0) {
    what += " with at least " + std::to_string(job.gpu_memory_mb / 1024) + "GB";
  }
  return what;
}

// Why the job can never run on the current nodes, or "" if some node could
// run it once enough GPUs are free.
std::string Unsatisfiable(const PendingJob& job, const std::vector<NodeView>& nodes) {
  bool any_node = false, type_seen = false, memory_ok = false;
  for (const auto& n : nodes) {
    if (!n.schedulable) continue;
    any_node = true;
    Fit fit = FitOn(job, n);
    if (fit.usable >= job.gpu_count) return "";
    for (const auto& g : n.gpus) {
      bool type_ok = job.gpu_types.empty() || std::find(job.gpu_types.begin(), job.gpu_types.end(),
                                                        g.model) != job.gpu_types.end();
      type_seen = type_seen || type_ok;
      memory_ok = memory_ok || (type_ok && g.memory_mb >= job.gpu_memory_mb);
    }
  }
  if (!any_node) return "no node is registered";
  if (!job.gpu_types.empty() && !type_seen) {
    return "no node has gpu_type=" + Join(job.gpu_types, "|");
  }
  if (job.gpu_memory_mb > 0 && !memory_ok) {
    return "no node has a " + (job.gpu_types.empty() ? std::string("GPU") : Join(job.gpu_types, "|")) +
           " with " + std::to_string(job.gpu_memory_mb / 1024) + "GB of memory";
  }
  return "no node has " + Describe(job);
}

}  // namespace

Plan Schedule(const ScheduleInput& in) {
  Plan plan;
  std::vector<const PendingJob*> queue;
  queue.reserve(in.queue.size());
  for (const auto& j : in.queue) queue.push_back(&j);
  std::sort(queue.begin(), queue.end(), [](const PendingJob* a, const PendingJob* b) {
    if (a->submitted_at != b->submitted_at) return a->submitted_at < b->submitted_at;
    return a->id < b->id;
  });

  // Working copy: placements made in this plan consume GPUs.
  std::vector<NodeView> nodes = in.nodes;
  std::sort(nodes.begin(), nodes.end(),
            [](const NodeView& a, const NodeView& b) { return a.id < b.id; });
  // Nodes an earlier waiting job could use: later jobs may not take them.
  std::set<size_t> held;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (in.held_nodes.count(nodes[i].id)) held.insert(i);
  }
  int waiting_ahead = in.waiting_ahead;

  // Jobs of one shape (count, types, memory) that failed to start fail the
  // same way for the rest of this pass: GPUs are only ever taken, never
  // freed, within one pass. Remembering that keeps a long queue of alike
  // jobs linear.
  std::map<std::string, std::string> unsatisfiable;  // shape -> reason
  std::set<std::string> waiting_shapes;
  for (const PendingJob* job : queue) {
    std::string shape = std::to_string(job->gpu_count) + "/" + std::to_string(job->gpu_memory_mb) +
                        "/" + Join(job->gpu_types, "|");
    auto known = unsatisfiable.find(shape);
    if (known == unsatisfiable.end()) {
      known = unsatisfiable.emplace(shape, Unsatisfiable(*job, nodes)).first;
    }
    if (!known->second.empty()) {
      plan.pending_reasons[job->id] = known->second;
      continue;  // cannot run anywhere: it holds nothing back
    }
    if (waiting_shapes.count(shape)) {
      plan.pending_reasons[job->id] = "waiting for " + Describe(*job) +
                                      " to be free on one node; " +
                                      std::to_string(waiting_ahead) +
                                      (waiting_ahead == 1 ? " job" : " jobs") + " ahead";
      ++waiting_ahead;
      continue;  // its nodes are held already
    }
    // Best fit: the usable node with the fewest free matching GPUs that
    // still fits, to keep whole nodes free for big jobs.
    int best = -1;
    int best_free = 0;
    bool blocked_by_hold = false;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!nodes[i].schedulable) continue;
      Fit fit = FitOn(*job, nodes[i]);
      if (fit.free < job->gpu_count) continue;
      if (held.count(i)) {
        blocked_by_hold = true;
        continue;
      }
      if (best < 0 || fit.free < best_free) {
        best = static_cast<int>(i);
        best_free = fit.free;
      }
    }
    if (best >= 0) {
      Placement p{job->id, nodes[best].id, {}};
      for (auto& g : nodes[best].gpus) {
        if (static_cast<int>(p.gpus.size()) == job->gpu_count) break;
        if (g.free && GpuMatches(*job, g)) {
          g.free = false;
          p.gpus.push_back(g.index);
        }
      }
      std::sort(p.gpus.begin(), p.gpus.end());
      plan.placements.push_back(std::move(p));
      continue;
    }
    std::string reason = "waiting for " + Describe(*job) + " to be free on one node";
    if (blocked_by_hold || waiting_ahead > 0) {
      reason += "; " + std::to_string(waiting_ahead) + (waiting_ahead == 1 ? " job" : " jobs") +
                " ahead";
    }
    plan.pending_reasons[job->id] = reason;
    ++waiting_ahead;
    waiting_shapes.insert(shape);
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].schedulable && FitOn(*job, nodes[i]).usable >= job->gpu_count) held.insert(i);
    }
  }
  for (size_t i : held) plan.held_nodes.insert(nodes[i].id);
  plan.waiting_ahead = waiting_ahead;
  return plan;
}

}  // namespace tide::sched
