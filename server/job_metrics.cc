#include "server/job_metrics.h"

namespace tide::server {

using nlohmann::json;

void AddMetricLines(std::string_view text, int attempt, MetricSeries* out, bool last_only) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.empty()) {
      out->skipped += 1;
      continue;
    }
    for (auto& [k, v] : j.items()) out->last[k] = v;
    if (!last_only) {
      j["attempt"] = attempt;
      out->points.push_back(std::move(j));
    }
  }
}

MetricSeries ReadMetrics(BlobStore* blobs, const std::string& job, int attempts, int rank,
                         int only_attempt, bool last_only) {
  MetricSeries out;
  for (int a = only_attempt > 0 ? only_attempt : 1; a <= (only_attempt > 0 ? only_attempt : attempts);
       ++a) {
    auto text = blobs->ReadLog(job, a, rank, 0, 64 << 20, Stream::kMetrics);
    if (text.ok()) AddMetricLines(*text, a, &out, last_only);
  }
  return out;
}

}  // namespace tide::server
