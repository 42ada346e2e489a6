// Metrics a job reported: the JSON lines it appended to $TIDE_METRICS_FILE,
// shipped by the agent per attempt (BlobStore, Stream::kMetrics).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "server/blob_store.h"

namespace tide::server {

struct MetricSeries {
  nlohmann::json points = nlohmann::json::array();  // each line, with "attempt" added
  nlohmann::json last = nlohmann::json::object();   // the newest value of each metric
  int skipped = 0;  // lines that were not a JSON object
};

// Adds the lines of `text` (one attempt's metrics) to `out`. With
// `last_only`, only `last` and `skipped` are kept.
void AddMetricLines(std::string_view text, int attempt, MetricSeries* out, bool last_only = false);

// Every attempt's metrics of `rank` (attempts 1..`attempts`, or only
// `only_attempt` when it is > 0).
MetricSeries ReadMetrics(BlobStore* blobs, const std::string& job, int attempts, int rank,
                         int only_attempt = 0, bool last_only = false);

}  // namespace tide::server
