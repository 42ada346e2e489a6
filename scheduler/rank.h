// Ranking: the order in which the policy considers queued jobs.
//
//   fifo        tier, submit time
//   sjf-oracle  tier, known duration, submit time
//   fair        tier, then accounts by fair share, then priority, submit time
//   tide        tier, service level (least attained service first), then
//               accounts by fair share within the level, then priority,
//               submit time
//
// Fair share is progressive filling: an account's score is its decayed
// usage plus what it runs now, over its weight; each job taken from an
// account raises its score by the job's GPUs x the fair-share horizon, so
// accounts interleave instead of one taking the whole queue at once.
#pragma once

#include <cstdint>
#include <vector>

#include "scheduler/snapshot.h"

namespace tide::sched {

// The level of a job that has received `attained_gpu_s` of service.
int ServiceLevel(int64_t attained_gpu_s, const SchedulerConfig& config);

// Level a queued job ranks at now (starvation promotion included).
int PendingLevel(const PendingJob& job, const SchedulerConfig& config, int64_t now_ms);

// The queue as indices into in.queue, best first.
std::vector<uint32_t> Rank(const ScheduleInput& in);

// GPU-seconds one GPU of current allocation counts for in a fair-share score.
inline constexpr double kFairShareHorizonS = 3600;

// An account's fair-share score: its decayed usage plus the horizon of the
// GPUs it holds now, over its weight. Between accounts whose queue heads
// are of equal tier and level, the lowest score is served first, and each
// job it is given adds its GPUs' horizon to it.
inline double FairShareScore(double usage_gpu_s, double running_gpus, double weight) {
  return (usage_gpu_s + kFairShareHorizonS * running_gpus) / (weight > 0 ? weight : 1);
}

}  // namespace tide::sched
