// Trace replay: jobs from a real cluster trace run through the very
// Schedule() the server uses, in virtual time (no sleeping, no server).
//
// Events are arrivals, finishes and, under the tide policy, the moments a
// running job's attained service crosses a level threshold. At each event
// time the core makes a plan from the current state; placements start at
// once, preempted jobs stop at once and return to the queue with attempt+1,
// and resume from their last checkpoint after a restart penalty.
// Deterministic: the same trace, cluster and options give the same result.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "scheduler/replay/trace.h"
#include "scheduler/snapshot.h"

namespace tide::sched::replay {

struct SimOptions {
  SchedulerConfig config;
  // Seconds a resumed attempt spends restoring its checkpoint before it
  // makes progress again (the cost of a preemption).
  int64_t restart_penalty_s = 60;
  // Stand-in for a walltime request where the trace has none: max_runtime =
  // ceil(duration x factor). 0 = jobs have no max_runtime (reservations
  // then hold nodes outright; nothing can backfill onto them).
  double walltime_factor = 0;
  // Non-empty: each account is its own partition, running only on nodes
  // whose label `partition_label` equals the account (Philly's VCs).
  std::string partition_label;
  int64_t fair_half_life_s = 7 * 24 * 3600;
  // What one pass of the scheduler was given (copies), for tests that
  // compare it with what the server builds from the same state.
  struct PassInput {
    std::vector<NodeView> nodes;
    std::vector<PendingJob> queue;
    std::vector<RunningJob> running;
    int64_t now_ms = 0;
  };
  // Called before every pass when set.
  std::function<void(const PassInput&)> on_pass;
};

struct JobResult {
  std::string id;
  std::string account;
  int gpus = 0;
  int64_t submit_s = 0;
  int64_t duration_s = 0;
  int64_t start_s = -1;  // first start; -1: never started
  int64_t finish_s = -1;
  int attempts = 0;
  std::string note;  // why it never ran
  bool whole_node = false;  // needs every GPU of the largest node (or a gang of them)
};

struct AccountResult {
  std::string account;
  int jobs = 0;
  double avg_jct_s = 0;
  double avg_queue_s = 0;
  double gpu_hours = 0;
  // Finish-time fairness: mean over the account's jobs of JCT / run time
  // (1 = no waiting, no slowdown).
  double ftf = 0;
};

struct SimResult {
  int jobs = 0;           // jobs that ran to completion
  int unschedulable = 0;  // jobs no node or partition can ever hold (see per_job notes)
  double avg_jct_s = 0;   // completion time: finish - submit
  double p50_jct_s = 0;
  double p99_jct_s = 0;
  double avg_queue_s = 0;  // first start - submit
  int64_t makespan_s = 0;  // last finish - first submit
  double gpu_utilization = 0;  // allocated GPU-seconds / (GPUs x makespan)
  int64_t preemptions = 0;
  int64_t scheduler_passes = 0;
  double jain_ftf = 0;  // Jain's index over the accounts' ftf (1 = equal)
  double max_ftf = 0;   // the worst-treated account's ftf
  // What consumers paid: GPU-seconds held x the node's price (credits).
  double cost_credits = 0;
  // Fragmentation: the share of idle GPU-time spent on partly used nodes,
  // where a job that wants a whole node cannot use it (0 = idle GPUs are
  // always whole free nodes).
  double fragmentation = 0;
  int whole_node_jobs = 0;          // completed jobs that needed a whole node
  double avg_queue_whole_node_s = 0;  // their average queueing delay
  std::vector<JobResult> per_job;  // in trace order
  std::vector<AccountResult> per_account;
};

SimResult Simulate(const std::vector<TraceJob>& jobs, const std::vector<NodeView>& nodes,
                   const SimOptions& options);

}  // namespace tide::sched::replay
