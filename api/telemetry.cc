#include "api/telemetry.h"

#include <cmath>
#include <type_traits>

namespace tide::api {

namespace {

double Round1(double v) { return std::round(v * 10.0) / 10.0; }

json ReadingJson(const TelemetryReading& r) {
  return {{"at", r.at},
          {"utilization_pct", r.utilization_pct},
          {"memory_used_mb", r.memory_used_mb},
          {"temperature_c", r.temperature_c}};
}

json StatJson(const TelemetryStat& s) {
  return {{"count", s.count}, {"min", Round1(s.min)}, {"avg", Round1(s.avg)}, {"max", Round1(s.max)}};
}

template <typename T>
T Get(const json& j, const char* key, T def) {
  if (!j.is_object() || !j.contains(key)) return def;
  const json& v = j[key];
  if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string() ? v.get<std::string>() : def;
  } else if constexpr (std::is_same_v<T, bool>) {
    return v.is_boolean() ? v.get<bool>() : def;
  } else {
    return v.is_number() ? v.get<T>() : def;
  }
}

TelemetryReading ReadingOf(const json& j) {
  TelemetryReading r;
  r.at = Get<int64_t>(j, "at", 0);
  r.utilization_pct = Get<int>(j, "utilization_pct", -1);
  r.memory_used_mb = Get<int64_t>(j, "memory_used_mb", -1);
  r.temperature_c = Get<int>(j, "temperature_c", -1);
  return r;
}

TelemetryStat StatOf(const json& j) {
  TelemetryStat s;
  s.count = Get<int64_t>(j, "count", 0);
  s.min = Get<double>(j, "min", 0);
  s.avg = Get<double>(j, "avg", 0);
  s.max = Get<double>(j, "max", 0);
  return s;
}

const json& Member(const json& j, const char* key) {
  static const json kNull;
  return j.is_object() && j.contains(key) ? j[key] : kNull;
}

}  // namespace

json ToJson(const GpuSeries& g) {
  json recent = json::array();
  for (const auto& r : g.recent) recent.push_back(ReadingJson(r));
  json tiers = json::array();
  for (const auto& tier : g.tiers) {
    json buckets = json::array();
    for (const auto& b : tier.buckets) {
      buckets.push_back({{"start", b.start},
                         {"width_ms", b.width_ms},
                         {"readings", b.readings},
                         {"utilization_pct", StatJson(b.utilization_pct)},
                         {"memory_used_mb", StatJson(b.memory_used_mb)},
                         {"temperature_c", StatJson(b.temperature_c)}});
    }
    tiers.push_back({{"width_ms", tier.width_ms}, {"buckets", buckets}});
  }
  return {{"node_id", g.node_id},
          {"node", g.node},
          {"rank", g.rank},
          {"index", g.index},
          {"model", g.model},
          {"memory_mb", g.memory_mb},
          {"now", ReadingJson(g.now)},
          {"average",
           {{"readings", g.readings},
            {"utilization_pct", Round1(g.avg_utilization_pct)},
            {"memory_used_mb", Round1(g.avg_memory_used_mb)}}},
          {"recent", recent},
          {"tiers", tiers}};
}

json ToJson(const NodeTelemetry& t) {
  json gpus = json::array();
  for (const GpuSeries& g : t.gpus) gpus.push_back(ToJson(g));
  return {{"node_id", t.node_id}, {"node", t.node}, {"at", t.at}, {"gpus", gpus}};
}

json ToJson(const JobTelemetry& t) {
  json gpus = json::array();
  for (const GpuSeries& g : t.gpus) gpus.push_back(ToJson(g));
  json j = {{"job", t.job_id},
            {"status", t.status},
            {"attempt", t.attempt},
            {"at", t.at},
            {"gpus", gpus},
            {"average",
             {{"readings", t.readings},
              {"utilization_pct", Round1(t.avg_utilization_pct)},
              {"memory_used_mb", Round1(t.avg_memory_used_mb)},
              {"first_at", t.first_at},
              {"last_at", t.last_at}}},
            {"window",
             {{"seconds", t.window_s},
              {"readings", t.window_readings},
              {"utilization_pct", Round1(t.window_utilization_pct)}}},
            {"threshold_pct", t.threshold_pct},
            {"low_utilization", t.low_utilization}};
  if (t.low_utilization) j["low_utilization_reason"] = t.low_utilization_reason;
  return j;
}

Result<JobTelemetry> JobTelemetryFromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("telemetry must be an object", "body");
  JobTelemetry t;
  t.job_id = Get<std::string>(j, "job", "");
  t.status = Get<std::string>(j, "status", "");
  t.attempt = Get<int>(j, "attempt", 0);
  t.at = Get<int64_t>(j, "at", 0);
  const json& avg = Member(j, "average");
  t.readings = Get<int64_t>(avg, "readings", 0);
  t.avg_utilization_pct = Get<double>(avg, "utilization_pct", 0);
  t.avg_memory_used_mb = Get<double>(avg, "memory_used_mb", 0);
  t.first_at = Get<int64_t>(avg, "first_at", 0);
  t.last_at = Get<int64_t>(avg, "last_at", 0);
  const json& window = Member(j, "window");
  t.window_s = Get<int64_t>(window, "seconds", 0);
  t.window_readings = Get<int64_t>(window, "readings", 0);
  t.window_utilization_pct = Get<double>(window, "utilization_pct", 0);
  t.threshold_pct = Get<int>(j, "threshold_pct", 0);
  t.low_utilization = Get<bool>(j, "low_utilization", false);
  t.low_utilization_reason = Get<std::string>(j, "low_utilization_reason", "");
  const json& gpus = Member(j, "gpus");
  if (!gpus.is_array()) return t;
  for (const json& gj : gpus) {
    GpuSeries g;
    g.node_id = Get<std::string>(gj, "node_id", "");
    g.node = Get<std::string>(gj, "node", "");
    g.rank = Get<int>(gj, "rank", 0);
    g.index = Get<int>(gj, "index", 0);
    g.model = Get<std::string>(gj, "model", "");
    g.memory_mb = Get<int64_t>(gj, "memory_mb", 0);
    g.now = ReadingOf(Member(gj, "now"));
    const json& ga = Member(gj, "average");
    g.readings = Get<int64_t>(ga, "readings", 0);
    g.avg_utilization_pct = Get<double>(ga, "utilization_pct", 0);
    g.avg_memory_used_mb = Get<double>(ga, "memory_used_mb", 0);
    if (const json& recent = Member(gj, "recent"); recent.is_array()) {
      for (const json& r : recent) g.recent.push_back(ReadingOf(r));
    }
    if (const json& tiers = Member(gj, "tiers"); tiers.is_array()) {
      for (const json& tj : tiers) {
        TelemetryTier tier;
        tier.width_ms = Get<int64_t>(tj, "width_ms", 0);
        if (const json& buckets = Member(tj, "buckets"); buckets.is_array()) {
          for (const json& bj : buckets) {
            TelemetryBucket b;
            b.start = Get<int64_t>(bj, "start", 0);
            b.width_ms = Get<int64_t>(bj, "width_ms", 0);
            b.readings = Get<int64_t>(bj, "readings", 0);
            b.utilization_pct = StatOf(Member(bj, "utilization_pct"));
            b.memory_used_mb = StatOf(Member(bj, "memory_used_mb"));
            b.temperature_c = StatOf(Member(bj, "temperature_c"));
            tier.buckets.push_back(b);
          }
        }
        g.tiers.push_back(std::move(tier));
      }
    }
    t.gpus.push_back(std::move(g));
  }
  return t;
}

}  // namespace tide::api
