#include "server/gpu_history.h"

#include <algorithm>
#include <utility>

namespace tide::server {

void Stat::Add(double v) {
  if (v < 0) return;
  if (count == 0) {
    min = max = v;
  } else {
    min = std::min(min, v);
    max = std::max(max, v);
  }
  sum += v;
  ++count;
}

void Stat::Merge(const Stat& other) {
  if (other.count == 0) return;
  if (count == 0) {
    *this = other;
    return;
  }
  min = std::min(min, other.min);
  max = std::max(max, other.max);
  sum += other.sum;
  count += other.count;
}

namespace {

void Fold(Bucket& b, const GpuReading& r) {
  b.readings += 1;
  b.utilization_pct.Add(r.utilization_pct);
  b.memory_used_mb.Add(static_cast<double>(r.memory_used_mb));
  b.temperature_c.Add(r.temperature_c);
}

int64_t FloorTo(int64_t at, int64_t width) {
  int64_t rem = at % width;
  if (rem < 0) rem += width;
  return at - rem;
}

}  // namespace

GpuHistory::GpuHistory(HistoryShape shape) : shape_(std::move(shape)) {
  if (shape_.recent == 0) shape_.recent = 1;
  for (Tier& t : shape_.tiers) t.width_ms = std::max<int64_t>(t.width_ms, 1);
  tiers_.resize(shape_.tiers.size());
}

void GpuHistory::Add(const GpuReading& r) {
  if (first_at_ == 0) first_at_ = r.at;
  recent_.push_back(r);
  while (recent_.size() > shape_.recent) recent_.pop_front();
  for (size_t i = 0; i < tiers_.size(); ++i) {
    const Tier& shape = shape_.tiers[i];
    TierState& t = tiers_[i];
    const int64_t start = FloorTo(r.at, shape.width_ms);
    if (t.open.readings > 0 && start > t.open.start) {
      t.closed.push_back(std::move(t.open));
      while (t.closed.size() > shape.capacity) t.closed.pop_front();
      t.open = Bucket{};
    }
    if (t.open.readings == 0) {
      t.open.start = start;
      t.open.width_ms = shape.width_ms;
    }
    Fold(t.open, r);
  }
  if (total_.readings == 0) total_.start = r.at;
  total_.width_ms = std::max<int64_t>(r.at - total_.start, 0);
  Fold(total_, r);
}

std::vector<Bucket> GpuHistory::Buckets(size_t tier) const {
  const TierState& t = tiers_.at(tier);
  std::vector<Bucket> out(t.closed.begin(), t.closed.end());
  if (t.open.readings > 0) out.push_back(t.open);
  return out;
}

Stat GpuHistory::Since(int64_t since, bool memory) const {
  Stat s;
  for (const GpuReading& r : recent_) {
    if (r.at < since) continue;
    s.Add(memory ? static_cast<double>(r.memory_used_mb) : r.utilization_pct);
  }
  const int64_t oldest = recent_.empty() ? since : recent_.front().at;
  if (oldest <= since || tiers_.empty()) return s;
  for (const Bucket& b : Buckets(0)) {
    if (b.start < since || b.start + b.width_ms > oldest) continue;
    s.Merge(memory ? b.memory_used_mb : b.utilization_pct);
  }
  return s;
}

Stat GpuHistory::UtilizationSince(int64_t since) const { return Since(since, false); }
Stat GpuHistory::MemorySince(int64_t since) const { return Since(since, true); }

}  // namespace tide::server
