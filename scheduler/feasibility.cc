#include "scheduler/feasibility.h"

#include <algorithm>
#include <cstdio>

namespace tide::sched {

namespace {

std::string Join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

bool TypeMatches(const PendingJob& job, const GpuSlot& gpu) {
  return job.gpu_types.empty() ||
         std::find(job.gpu_types.begin(), job.gpu_types.end(), gpu.model) != job.gpu_types.end();
}

bool LabelsHold(const PendingJob& job, const NodeView& node) {
  for (const auto& [key, want] : job.constraints) {
    auto it = node.labels.find(key);
    if (it == node.labels.end() || it->second != want) return false;
  }
  return true;
}

bool ImageOffered(const PendingJob& job, const NodeView& node) {
  return std::find(node.images.begin(), node.images.end(), job.image) != node.images.end();
}

bool HostFits(const PendingJob& job, const NodeView& node) {
  if (job.cpus > 0 && node.cpus > 0 && node.cpus < job.cpus) return false;
  if (job.memory_mb > 0 && node.memory_mb > 0 && node.memory_mb < job.memory_mb) return false;
  return true;
}

int MatchingGpus(const PendingJob& job, const NodeView& node) {
  int n = 0;
  for (const auto& g : node.gpus) n += GpuMatches(job, g) ? 1 : 0;
  return n;
}

std::string Credits(int64_t micro) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.2f", static_cast<double>(micro) / 1e6);
  return buf;
}

}  // namespace

bool GpuMatches(const PendingJob& job, const GpuSlot& gpu) {
  if (job.gpu_memory_mb > 0 && gpu.memory_mb < job.gpu_memory_mb) return false;
  return TypeMatches(job, gpu);
}

int UsableGpus(const PendingJob& job, const NodeView& node) {
  if (!node.schedulable || node.draining) return 0;
  if (job.max_price > 0 && node.price > job.max_price) return 0;
  if (!ImageOffered(job, node) || !LabelsHold(job, node) || !HostFits(job, node)) return 0;
  return MatchingGpus(job, node);
}

std::string Describe(const PendingJob& job) {
  std::string what = std::to_string(job.gpu_count) + " ";
  if (!job.gpu_types.empty()) what += Join(job.gpu_types, "|") + " ";
  what += job.gpu_count == 1 ? "GPU" : "GPUs";
  if (job.gpu_memory_mb > 0) {
    what += " with at least " + std::to_string(job.gpu_memory_mb / 1024) + "GB";
  }
  if (job.nodes > 1) what = std::to_string(job.nodes) + " nodes x " + what;
  return what;
}

// Filters are applied one at a time so the message names the first one
// that leaves too few nodes: "no node has gpu_type=H100", "no node has
// labels region=eu", ...
std::string Unsatisfiable(const PendingJob& job, const std::vector<NodeView>& nodes,
                          WaitKind* kind) {
  *kind = WaitKind::kUnsatisfiable;
  int ready = 0, draining = 0, imaged = 0, typed = 0, sized = 0, counted = 0, labelled = 0, hosted = 0,
      priced = 0;
  int64_t cheapest = -1;
  for (const auto& n : nodes) {
    if (!n.schedulable) continue;
    ++ready;
    if (n.draining) {
      ++draining;
      continue;
    }
    if (!ImageOffered(job, n)) continue;
    ++imaged;
    bool type_ok = false, size_ok = false;
    for (const auto& g : n.gpus) {
      if (!TypeMatches(job, g)) continue;
      type_ok = true;
      size_ok = size_ok || job.gpu_memory_mb <= 0 || g.memory_mb >= job.gpu_memory_mb;
    }
    if (!type_ok) continue;
    ++typed;
    if (!size_ok) continue;
    ++sized;
    if (MatchingGpus(job, n) < job.gpu_count) continue;
    ++counted;
    if (!LabelsHold(job, n)) continue;
    ++labelled;
    if (!HostFits(job, n)) continue;
    ++hosted;
    if (cheapest < 0 || n.price < cheapest) cheapest = n.price;
    if (job.max_price > 0 && n.price > job.max_price) continue;
    ++priced;
  }
  const int need = job.nodes;
  if (priced >= need) return "";
  std::string types = job.gpu_types.empty() ? "GPU" : Join(job.gpu_types, "|");
  if (ready == 0) return "no node is registered";
  if (ready == draining) return "every node is draining";
  if (imaged < need && imaged < ready - draining) {
    return (need > 1 ? "fewer than " + std::to_string(need) + " nodes offer"
                     : std::string("no node offers")) +
           " image \"" + job.image + "\"";
  }
  if (typed == 0) return "no node has gpu_type=" + Join(job.gpu_types, "|");
  if (sized == 0) {
    return "no node has a " + types + " with " + std::to_string(job.gpu_memory_mb / 1024) +
           "GB of memory";
  }
  if (counted < need) {
    if (need > 1) {
      return std::to_string(counted) + " of the " + std::to_string(need) + " nodes needed have " +
             std::to_string(job.gpu_count) + " " + types + (job.gpu_count == 1 ? "" : "s");
    }
    return "no node has " + Describe(job);
  }
  if (labelled < need) {
    std::string want;
    for (const auto& [k, v] : job.constraints) want += (want.empty() ? "" : ",") + k + "=" + v;
    return (need > 1 ? "fewer than " + std::to_string(need) + " nodes" : std::string("no node")) +
           " with " + Describe(job) + " has labels " + want;
  }
  if (hosted < need) {
    char buf[96];
    snprintf(buf, sizeof(buf), " with %.1f CPUs and %lld MB of memory", job.cpus,
             static_cast<long long>(job.memory_mb));
    return "no node with " + Describe(job) + " has room for " + std::string(buf + 6);
  }
  *kind = WaitKind::kPrice;
  return "max_price " + Credits(job.max_price) + " per GPU-hour is below every matching node's price" +
         " (cheapest " + Credits(cheapest) + ")";
}

}  // namespace tide::sched
