// A job's LaunchSpec for runtime tests and benchmarks, over directories laid
// out as the agent lays them out.
#pragma once

#include <string>

#include "agent/runtime/runtime.h"

namespace tide::agent::testing {

// Creates DATA_DIR/jobs/ID/1/{work,output,control} and returns the spec of
// `sh -c SCRIPT` there: work and output writable, control readable, tagged
// and keyed by `id`, at most 256 processes.
LaunchSpec JobSpec(const std::string& data_dir, const std::string& id, const std::string& script);

}  // namespace tide::agent::testing
