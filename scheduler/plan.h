// What the scheduler decides: placements to make now, running jobs to stop
// for higher-ranked ones, reservations for blocked jobs, and for every job
// left waiting the reason in words a user understands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/snapshot.h"

namespace tide::sched {

struct Placement {
  std::string job_id;
  std::vector<NodeAlloc> allocs;  // one per node; several for a gang
};

struct Preemption {
  std::string victim_id;  // a running job to stop (notice, grace, requeue)
  std::string for_job_id;  // the pending job that needs its GPUs
};

// A blocked job's claim on nodes from a time on: later jobs may use these
// nodes now only if they end (by max_runtime) before `start`.
struct Reservation {
  std::string job_id;
  int64_t start = 0;  // expected start; 0 if no end time is known
  std::vector<std::string> node_ids;
};

enum class WaitKind : uint8_t {
  kUnsatisfiable,  // no node could ever run it as it is
  kResources,      // waiting for GPUs (or CPUs, memory) to be free
  kBehind,         // would fit now, but the GPUs are held for work ranked ahead
  kPreempting,     // lower-ranked jobs are being stopped to make room
  kPrice,          // matching nodes exist, none at or below its max_price
};
const char* WaitKindName(WaitKind k);

struct PendingInfo {
  uint32_t job = 0;  // index into ScheduleInput::queue
  WaitKind kind = WaitKind::kResources;
  uint32_t text = 0;  // index into Plan::texts; see PendingReason()
  int position = 0;   // place among waiting jobs, 1-based, in rank order
  int64_t reserved_start = 0;  // when its reservation starts, if it has one
};

struct Plan {
  std::vector<Placement> placements;
  std::vector<Preemption> preemptions;
  std::vector<Reservation> reservations;
  std::vector<PendingInfo> pending;  // every queued job not placed, in rank order
  // Nodes held or reserved for waiting jobs. A later pass over only newer
  // jobs that treats these as full cannot take what those jobs wait for.
  std::vector<std::string> claimed;
  // Reason texts, shared by the jobs of one shape that wait the same way.
  std::vector<std::string> texts;
  // The queue (indices into ScheduleInput::queue) in the order the policy
  // ranked it.
  std::vector<uint32_t> ranked;
};

// The reason a pending job waits, as `tide status` shows it: "waiting for 4
// RTX4090 GPUs to be free on one node; 3 jobs ahead".
std::string PendingReason(const Plan& plan, const PendingInfo& info);

}  // namespace tide::sched
