// GpuHistory: one GPU's telemetry over time, in memory bounded by its shape
// however long it runs.
//
//   heartbeat ──▶ recent ring (full rate, the newest `recent` readings)
//             └─▶ the open bucket of each tier (e.g. minutes, hours): count,
//                 min, avg, max of utilisation, memory used, temperature;
//                 a bucket closes when a reading falls in a later one, and a
//                 tier keeps its newest `capacity` closed buckets
//   and a total over every reading ever added (the run average).
//
// Every tier is fed from the readings themselves, not from the tier below,
// so each bucket's min/avg/max is exact. Unknown values (-1) count in no
// statistic. Readings are expected in time order; one that is older than
// the open bucket of a tier is folded into that bucket.
//
// Not thread-safe: its owner's lock guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace tide::server {

struct GpuReading {
  int64_t at = 0;  // unix ms
  int utilization_pct = -1;
  int64_t memory_used_mb = -1;
  int temperature_c = -1;
};

// Count, sum, min and max of one quantity.
struct Stat {
  int64_t count = 0;
  double sum = 0;
  double min = 0;
  double max = 0;

  // Ignores negative values (unknown).
  void Add(double v);
  void Merge(const Stat& other);
  double avg() const { return count > 0 ? sum / static_cast<double>(count) : 0; }
};

struct Bucket {
  int64_t start = 0;     // unix ms, a multiple of width_ms
  int64_t width_ms = 0;
  int64_t readings = 0;
  Stat utilization_pct;
  Stat memory_used_mb;
  Stat temperature_c;
};

struct Tier {
  int64_t width_ms = 60'000;
  size_t capacity = 60;  // closed buckets kept
};

// How much history a GpuHistory keeps: at most `recent` readings plus
// sum(capacity + 1) buckets.
struct HistoryShape {
  size_t recent = 300;
  std::vector<Tier> tiers = {{60'000, 240}, {3'600'000, 168}};  // 4 h of minutes, a week of hours
};

class GpuHistory {
 public:
  explicit GpuHistory(HistoryShape shape = {});

  void Add(const GpuReading& r);

  // Oldest first.
  const std::deque<GpuReading>& recent() const { return recent_; }
  // Tier `tier`'s closed buckets and then its open one, oldest first.
  // REQUIRES: tier < shape().tiers.size()
  std::vector<Bucket> Buckets(size_t tier) const;
  // Every reading ever added.
  const Bucket& total() const { return total_; }
  const HistoryShape& shape() const { return shape_; }
  // The newest reading (at == 0 if none).
  GpuReading last() const { return recent_.empty() ? GpuReading{} : recent_.back(); }
  // The first reading's time, 0 if none.
  int64_t first_at() const { return first_at_; }

  // Utilisation over readings at or after `since`: the recent ring, and for
  // the time before its oldest reading the first tier's buckets that lie
  // wholly within [since, oldest recent).
  Stat UtilizationSince(int64_t since) const;
  // The same for memory used.
  Stat MemorySince(int64_t since) const;

 private:
  struct TierState {
    std::deque<Bucket> closed;
    Bucket open;  // open.readings == 0: none yet
  };
  Stat Since(int64_t since, bool memory) const;

  HistoryShape shape_;
  std::deque<GpuReading> recent_;
  std::vector<TierState> tiers_;
  Bucket total_;
  int64_t first_at_ = 0;
};

}  // namespace tide::server
