// The scheduler core: a pure function from a snapshot of the cluster and
// the queue to a plan. No I/O, no clock reads, no threads, no randomness:
// the same input gives the same plan, so the server, tests and (later) the
// trace simulator all run this very code.
//
// Policy here: FIFO by submit order with GPU count, GPU model and minimum GPU
// memory filters, best-fit packing onto the node with the fewest free GPUs
// that still fits. A job that cannot start now holds back the nodes it could
// use, so later jobs cannot starve it; later jobs may still start on nodes the
// waiting job cannot use at all.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace tide::sched {

struct GpuSlot {
  int index = 0;
  std::string model;  // canonical ("RTX4090", "A100")
  int64_t memory_mb = 0;
  bool free = true;
};

struct NodeView {
  std::string id;
  std::string name;
  bool schedulable = true;  // false for lost (or draining) nodes
  std::vector<GpuSlot> gpus;
};

struct PendingJob {
  std::string id;
  int gpu_count = 1;
  std::vector<std::string> gpu_types;  // canonical; empty = any
  int64_t gpu_memory_mb = 0;           // minimum per GPU; 0 = any
  int64_t submitted_at = 0;            // unix ms; ties broken by id
};

struct Placement {
  std::string job_id;
  std::string node_id;
  std::vector<int> gpus;  // GPU indices on the node, ascending
};

struct Plan {
  std::vector<Placement> placements;
  // Where the pass ended: nodes held by waiting jobs and how many wait.
  // Feeding them back as ScheduleInput::held_nodes and waiting_ahead with a
  // queue of only newer jobs gives the same result as a pass over the whole
  // queue (FIFO: newer jobs never change what older ones get).
  std::set<std::string> held_nodes;
  int waiting_ahead = 0;
  // For every job of the queue that is not placed: why not, in words a user
  // understands ("no node has GPU type H100", "waiting for 2 free RTX4090 GPUs;
  // 1 job ahead").
  std::map<std::string, std::string> pending_reasons;
};

struct ScheduleInput {
  const std::vector<NodeView>& nodes;
  const std::vector<PendingJob>& queue;  // any order; sorted inside
  int64_t now_ms = 0;
  // State left by a previous pass over older jobs (see Plan::held_nodes).
  std::set<std::string> held_nodes = {};
  int waiting_ahead = 0;
};

Plan Schedule(const ScheduleInput& in);

}  // namespace tide::sched
