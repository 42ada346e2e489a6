#include "server/telemetry.h"

#include <algorithm>
#include <cstdio>

#include "server/job_state.h"

namespace tide::server {

namespace {

GpuReading ReadingOf(const api::Gpu& g, int64_t at) {
  GpuReading r;
  r.at = at;
  r.utilization_pct = g.utilization_pct < 0 ? -1 : std::min(g.utilization_pct, 100);
  r.memory_used_mb = g.memory_used_mb;
  r.temperature_c = g.temperature_c;
  return r;
}

api::TelemetryReading WireReading(const GpuReading& r) {
  return {r.at, r.utilization_pct, r.memory_used_mb, r.temperature_c};
}

api::TelemetryStat WireStat(const Stat& s) { return {s.count, s.min, s.avg(), s.max}; }

// The wire form of one GPU's history; the caller names its node and rank.
api::GpuSeries SeriesOf(const GpuHistory& h, bool series) {
  api::GpuSeries s;
  s.now = WireReading(h.last());
  s.readings = h.total().readings;
  s.avg_utilization_pct = h.total().utilization_pct.avg();
  s.avg_memory_used_mb = h.total().memory_used_mb.avg();
  if (!series) return s;
  for (const GpuReading& r : h.recent()) s.recent.push_back(WireReading(r));
  for (size_t i = 0; i < h.shape().tiers.size(); ++i) {
    api::TelemetryTier tier;
    tier.width_ms = h.shape().tiers[i].width_ms;
    for (const Bucket& b : h.Buckets(i)) {
      tier.buckets.push_back({b.start, b.width_ms, b.readings, WireStat(b.utilization_pct),
                              WireStat(b.memory_used_mb), WireStat(b.temperature_c)});
    }
    s.tiers.push_back(std::move(tier));
  }
  return s;
}

std::string Percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", v);
  return buf;
}

std::string Minutes(int64_t ms) {
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

}  // namespace

void Telemetry::RecordNode(const std::string& node_id, const std::vector<api::Gpu>& gpus,
                           int64_t at) {
  for (const api::Gpu& g : gpus) {
    auto it = nodes_.find({node_id, g.index});
    if (it == nodes_.end()) {
      it = nodes_.emplace(std::make_pair(node_id, g.index), GpuHistory(options_.node_shape)).first;
    }
    it->second.Add(ReadingOf(g, at));
  }
}

void Telemetry::RecordJob(const std::string& job_id, int attempt, int rank,
                          const std::string& node_id, const std::vector<int>& indices,
                          const std::vector<api::Gpu>& gpus, int64_t at) {
  JobTelemetryEntry& e = jobs_[job_id];
  if (e.attempt != attempt) {
    e.attempt = attempt;
    e.attempt_first_at = 0;
    e.gpus.clear();
  }
  for (int index : indices) {
    auto g = std::find_if(gpus.begin(), gpus.end(), [&](const api::Gpu& x) { return x.index == index; });
    if (g == gpus.end()) continue;
    GpuReading r = ReadingOf(*g, at);
    auto it = e.gpus.find({node_id, index});
    if (it == e.gpus.end()) {
      it = e.gpus.emplace(std::make_pair(node_id, index),
                          JobTelemetryEntry::Gpu{rank, GpuHistory(options_.job_shape)})
               .first;
    }
    it->second.history.Add(r);
    e.utilization_pct.Add(r.utilization_pct);
    e.memory_used_mb.Add(static_cast<double>(r.memory_used_mb));
    if (e.first_at == 0) e.first_at = at;
    if (e.attempt_first_at == 0) e.attempt_first_at = at;
    e.last_at = std::max(e.last_at, at);
  }
}

void Telemetry::JobEnded(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.ended) return;
  it->second.ended = true;
  ended_.push_back(job_id);
  while (ended_.size() > options_.ended_jobs_kept) {
    auto old = jobs_.find(ended_.front());
    // A job that ran again after it ended (retried) is live once more.
    if (old != jobs_.end() && old->second.ended) jobs_.erase(old);
    ended_.pop_front();
  }
}

const GpuHistory* Telemetry::Node(const std::string& node_id, int index) const {
  auto it = nodes_.find({node_id, index});
  return it == nodes_.end() ? nullptr : &it->second;
}

const JobTelemetryEntry* Telemetry::Job(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

api::JobTelemetry Telemetry::View(const api::Job& job, const JobState& state, int64_t now,
                                  bool series) const {
  api::JobTelemetry out;
  out.job_id = job.id;
  out.status = api::JobStatusName(job.status);
  out.attempt = job.attempt;
  out.at = now;
  out.window_s = options_.low_utilization_window_ms / 1000;
  out.threshold_pct = options_.low_utilization_threshold_pct;
  const JobTelemetryEntry* e = Job(job.id);
  if (e == nullptr) return out;
  out.readings = e->utilization_pct.count;
  out.avg_utilization_pct = e->utilization_pct.avg();
  out.avg_memory_used_mb = e->memory_used_mb.avg();
  out.first_at = e->first_at;
  out.last_at = e->last_at;
  const int64_t since = now - options_.low_utilization_window_ms;
  Stat window;
  for (const auto& [key, g] : e->gpus) {
    const auto& [node_id, index] = key;
    api::GpuSeries s = SeriesOf(g.history, series);
    s.node_id = node_id;
    s.rank = g.rank;
    s.index = index;
    if (const NodeEntry* n = state.FindNode(node_id)) {
      s.node = n->node.name;
      for (const api::Gpu& ng : n->node.gpus) {
        if (ng.index != index) continue;
        s.model = ng.model;
        s.memory_mb = ng.memory_mb;
      }
    }
    out.gpus.push_back(std::move(s));
    window.Merge(g.history.UtilizationSince(since));
  }
  out.window_readings = window.count;
  out.window_utilization_pct = window.avg();
  const bool running = job.status == api::JobStatus::kRunning && e->attempt == job.attempt;
  if (running && e->attempt_first_at > 0 && e->attempt_first_at <= since &&
      window.count >= options_.low_utilization_min_readings &&
      window.avg() < options_.low_utilization_threshold_pct) {
    out.low_utilization = true;
    out.low_utilization_reason = "low GPU utilisation: " + Percent(window.avg()) +
                                 " on average over the last " +
                                 Minutes(options_.low_utilization_window_ms) + " (below " +
                                 std::to_string(options_.low_utilization_threshold_pct) + "%)";
  }
  return out;
}

api::NodeTelemetry Telemetry::NodeView(const api::Node& node, int64_t now, bool series) const {
  api::NodeTelemetry out;
  out.node_id = node.id;
  out.node = node.name;
  out.at = now;
  for (const api::Gpu& g : node.gpus) {
    const GpuHistory* h = Node(node.id, g.index);
    api::GpuSeries s = h != nullptr ? SeriesOf(*h, series) : api::GpuSeries{};
    s.node_id = node.id;
    s.node = node.name;
    s.index = g.index;
    s.model = g.model;
    s.memory_mb = g.memory_mb;
    out.gpus.push_back(std::move(s));
  }
  return out;
}

}  // namespace tide::server
