// Expected start times: the same core run forward in virtual time on a copy
// of the snapshot (a what-if, like Slurm's will-run mode). Running work ends
// at its expected end (start + max_runtime) or, where that is unknown, after
// a stand-in run time; work started in the what-if runs for its max_runtime
// or the stand-in. Pure and deterministic like Schedule().
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "scheduler/snapshot.h"

namespace tide::sched {

struct EstimateOptions {
  int64_t default_runtime_ms = 3'600'000;  // stand-in run time: one hour
  int max_steps = 64;                      // scheduling passes at most
};

// Job id -> expected start (ms, same clock as in.now_ms) for every queued
// job the what-if starts within its steps; jobs it does not start are
// absent (no estimate: unsatisfiable, or beyond the horizon).
std::unordered_map<std::string, int64_t> ExpectedStarts(const ScheduleInput& in,
                                                        const EstimateOptions& options = {});

}  // namespace tide::sched
