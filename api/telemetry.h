// What GET /v1/jobs/{id}/telemetry answers: the utilisation, memory and
// temperature of the GPUs a job holds, as the agents' heartbeats reported
// them, with averages over the whole run (docs/api.md).
//
//   gpus[]       one per GPU of the current (or last) attempt: the newest
//                reading, the run average, the recent readings at full rate
//                and coarser buckets (min/avg/max) for older time
//   average      over every reading of every GPU of every attempt
//   window       utilisation over the last `seconds` (the idle check's window)
//   low_utilization  a running job that kept its GPUs mostly idle for the
//                whole window (window average below threshold_pct)
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tide::api {

using nlohmann::json;

struct TelemetryReading {
  int64_t at = 0;  // unix ms
  int utilization_pct = -1;  // -1 = unknown
  int64_t memory_used_mb = -1;
  int temperature_c = -1;
};

struct TelemetryStat {
  int64_t count = 0;
  double min = 0;
  double avg = 0;
  double max = 0;
};

struct TelemetryBucket {
  int64_t start = 0;  // unix ms
  int64_t width_ms = 0;
  int64_t readings = 0;
  TelemetryStat utilization_pct;
  TelemetryStat memory_used_mb;
  TelemetryStat temperature_c;
};

// Buckets of one width, oldest first.
struct TelemetryTier {
  int64_t width_ms = 0;
  std::vector<TelemetryBucket> buckets;
};

struct GpuSeries {
  std::string node_id;
  std::string node;  // the node's name
  int rank = 0;      // of a multi-node job
  int index = 0;     // on its node
  std::string model;
  int64_t memory_mb = 0;
  TelemetryReading now;  // the newest reading
  // Over every reading of this GPU in this attempt.
  int64_t readings = 0;
  double avg_utilization_pct = 0;
  double avg_memory_used_mb = 0;
  std::vector<TelemetryReading> recent;  // empty when asked without series
  std::vector<TelemetryTier> tiers;
};

struct JobTelemetry {
  std::string job_id;
  std::string status;
  int attempt = 0;
  int64_t at = 0;  // the server's time of the answer
  std::vector<GpuSeries> gpus;
  // Over the run: every reading of every GPU the job held.
  int64_t readings = 0;
  double avg_utilization_pct = 0;
  double avg_memory_used_mb = 0;
  int64_t first_at = 0;
  int64_t last_at = 0;
  // The idle check.
  int64_t window_s = 0;
  int64_t window_readings = 0;
  double window_utilization_pct = 0;
  int threshold_pct = 0;
  bool low_utilization = false;
  std::string low_utilization_reason;  // set when low_utilization
};

// What GET /v1/nodes/{id}/telemetry answers: each GPU of a node over the
// server's life, at the node's history shape (rank and averages are per
// GPU; a node GPU has no rank).
struct NodeTelemetry {
  std::string node_id;
  std::string node;  // its name
  int64_t at = 0;    // the server's time of the answer
  std::vector<GpuSeries> gpus;
};

json ToJson(const GpuSeries& g);
json ToJson(const JobTelemetry& t);
json ToJson(const NodeTelemetry& t);
// Lenient: fields it does not know are ignored, missing ones keep defaults.
Result<JobTelemetry> JobTelemetryFromJson(const json& j);

}  // namespace tide::api
