// The scheduler core: a pure function from a snapshot (nodes, running jobs,
// queue, account usage, configuration, time) to a plan. No I/O, no clock
// reads, no threads, no randomness beyond the configured seed: the same
// input gives the same plan, so the server, the trace simulator (`tide sim`)
// and the wait-time estimate all run this very code.
//
// One pass, in rank order (rank.h), for each queued job:
//   1. feasible: the nodes that could ever run it (feasibility.h); none ->
//      it waits with the reason;
//   2. select: best fit, the usable nodes with the fewest free matching GPUs
//      that still fit (keeping whole nodes free for big jobs), then the
//      cheapest, then the most reliable; a gang takes all its nodes or none;
//      nodes reserved for a blocked job ahead are usable only by a job that
//      ends (by max_runtime) before the reservation starts;
//   3. if it cannot start: preempt lower-ranked work if the policy allows
//      (fewest victims; spot, low priority, high service level and fresh
//      checkpoints first), else reserve the nodes where it can start
//      earliest (EASY backfill), else wait.
#pragma once

#include "scheduler/plan.h"
#include "scheduler/snapshot.h"

namespace tide::sched {

Plan Schedule(const ScheduleInput& in);

}  // namespace tide::sched
