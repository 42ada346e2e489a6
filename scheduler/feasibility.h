// Feasibility: can a node ever run a job (its static shape: GPU models and
// memory, labels, price, host size, state), and if no node can, why not.
#pragma once

#include <string>
#include <vector>

#include "scheduler/plan.h"
#include "scheduler/snapshot.h"

namespace tide::sched {

bool GpuMatches(const PendingJob& job, const GpuSlot& gpu);

// GPUs of `node` the job could use, whether free or not; 0 if the node can
// never take the job (state, labels, price, host size).
int UsableGpus(const PendingJob& job, const NodeView& node);

// Why no `job.nodes` nodes can ever hold the job, or "" if they can.
// *kind is kPrice when only the price cap is in the way.
std::string Unsatisfiable(const PendingJob& job, const std::vector<NodeView>& nodes,
                          WaitKind* kind);

// "2 RTX4090 GPUs", "1 GPU with at least 24GB", "2 nodes x 8 GPUs".
std::string Describe(const PendingJob& job);

}  // namespace tide::sched
