// Telemetry: GPU utilisation, memory and temperature over time, per GPU of
// every node and per GPU of every job, as the agents' heartbeats report
// them (Reconciler::Heartbeat records; reads build GET
// /v1/jobs/{id}/telemetry).
//
// Memory is bounded whatever the run length: each GPU's history has a fixed
// shape (gpu_history.h: a ring of recent readings plus coarser buckets), a
// job keeps the GPUs of its current attempt only (its run average covers
// every attempt), and only the newest `ended_jobs_kept` ended jobs keep
// their telemetry. Telemetry lives in memory only: a restarted server starts
// again from the next heartbeat.
//
// The idle check: a running job is flagged `low_utilization` when its
// current attempt has been sampled for at least `low_utilization_window_ms`,
// the window holds at least `low_utilization_min_readings` readings, and
// their average utilisation is below `low_utilization_threshold_pct`.
//
// Not thread-safe on its own: the core's state lock guards it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/telemetry.h"
#include "api/types.h"
#include "server/gpu_history.h"

namespace tide::server {

class JobState;

struct TelemetryOptions {
  HistoryShape node_shape;  // 300 readings, 4 h of minutes, a week of hours
  // 150 readings, 2 h of minutes, a day of quarter hours.
  HistoryShape job_shape = {150, {{60'000, 120}, {900'000, 96}}};
  size_t ended_jobs_kept = 256;
  int64_t low_utilization_window_ms = 10 * 60'000;
  int low_utilization_threshold_pct = 10;
  int64_t low_utilization_min_readings = 3;
};

// A job's telemetry: the GPUs of its current attempt, and its run totals.
struct JobTelemetryEntry {
  struct Gpu {
    int rank = 0;
    GpuHistory history;
  };
  int attempt = 0;
  int64_t attempt_first_at = 0;  // the current attempt's first reading
  std::map<std::pair<std::string, int>, Gpu> gpus;  // (node id, index)
  Stat utilization_pct;  // every reading of every attempt
  Stat memory_used_mb;
  int64_t first_at = 0;
  int64_t last_at = 0;
  bool ended = false;
};

class Telemetry {
 public:
  explicit Telemetry(TelemetryOptions options = {}) : options_(std::move(options)) {}

  const TelemetryOptions& options() const { return options_; }

  // The readings of node `node_id`'s GPUs at `at` (unix ms).
  void RecordNode(const std::string& node_id, const std::vector<api::Gpu>& gpus, int64_t at);
  // Attempt `attempt` of `job_id` holds `indices` of `node_id` as rank
  // `rank`; `gpus` are the node's readings at `at`. A new attempt drops the
  // GPUs of the one before (not the run totals).
  void RecordJob(const std::string& job_id, int attempt, int rank, const std::string& node_id,
                 const std::vector<int>& indices, const std::vector<api::Gpu>& gpus, int64_t at);
  // The job ended: its telemetry stays until `ended_jobs_kept` newer ended
  // jobs push it out.
  void JobEnded(const std::string& job_id);

  const GpuHistory* Node(const std::string& node_id, int index) const;
  const JobTelemetryEntry* Job(const std::string& job_id) const;
  size_t jobs_kept() const { return jobs_.size(); }

  // What GET /v1/jobs/{id}/telemetry answers for `job` at `now`; without
  // `series`, only the newest readings and the averages.
  api::JobTelemetry View(const api::Job& job, const JobState& state, int64_t now,
                         bool series) const;
  // What GET /v1/nodes/{id}/telemetry answers for `node` at `now`.
  api::NodeTelemetry NodeView(const api::Node& node, int64_t now, bool series) const;

 private:
  TelemetryOptions options_;
  std::map<std::pair<std::string, int>, GpuHistory> nodes_;  // (node id, index)
  std::unordered_map<std::string, JobTelemetryEntry> jobs_;
  std::deque<std::string> ended_;  // oldest first
};

}  // namespace tide::server
