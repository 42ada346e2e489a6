// Batches (sweeps): many trials of one job template, submitted in one call.
//
//   {"experiment_batch": "exp-20250601", "max_concurrent": 4, "retry_times": 2,
//    "budget": 500,
//    "template": {"command": "python3 train.py --lr {learning_rate}", ...},
//    "jobs": [{"id": "run-001", "learning_rate": 2e-5}, ...],
//    "grid": {"learning_rate": [1e-5, 3e-5], "batch_size": [8, 16]}}
//
// Trials come from `jobs` (each keeps its id) and from the cartesian product
// of `grid` (ids generated), in that order. Every string of the template
// has `{name}` replaced by the trial's parameter; a string that is exactly
// "{name}", in a field that is not text (env, command, tags, ...), takes the
// parameter's value with its type (so "gpu_count": "{gpus}" is a number). `${...}` is left alone for the shell, and `{{` and
// `}}` stand for braces. Each trial becomes a normal job (docs/batches.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "api/types.h"

namespace tide::api {

inline constexpr size_t kMaxBatchTrials = 20'000;
inline constexpr int kMaxBatchConcurrency = 100'000;

struct BatchTrial {
  std::string id;
  json params = json::object();  // name -> string, number or boolean
};

struct BatchSpec {
  std::string name;        // experiment_batch
  int max_concurrent = 0;  // trials starting or running at once; 0 = no cap
  int retry_times = 0;     // for trials whose template sets none
  int64_t budget = 0;      // micro-credits for the whole batch; 0 = none
  json job_template = json::object();
  std::vector<BatchTrial> trials;
};

// Strict parse and expansion of a batch file's JSON. Every trial's job spec
// is built and checked, so an accepted file submits whole; errors name the
// field ("jobs[3].id", "grid.lr", "template.resources.gpu_count" with the
// trial).
Result<BatchSpec> BatchSpecFromJson(const json& j);

// A batch file's JSON for `b` (trials as "jobs", each with its id):
// BatchSpecFromJson reads it back to the same batch.
json ToJson(const BatchSpec& b);

// The job spec of `trial`: the template with its parameters substituted,
// the batch's retry_times, and the trial's name.
Result<JobSpec> TrialJobSpec(const BatchSpec& batch, const BatchTrial& trial);

// A parameter as text: strings as they are, numbers and booleans as JSON.
std::string ParamText(const json& value);

// A batch as the server keeps it; the counts, cost and status are derived
// from its trials when it is shown.
struct Batch {
  std::string id;
  std::string owner;
  std::string name;
  int max_concurrent = 0;
  int retry_times = 0;
  int64_t budget = 0;
  json job_template = json::object();
  int trials = 0;
  int64_t created_at = 0;
  bool cancel_requested = false;
};
json ToJson(const Batch& b);
Result<Batch> BatchFromJson(const json& j);

}  // namespace tide::api
