// `tide batch submit`: the pure part (a batch file's template from the
// command line), exposed for tests.
#pragma once

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "cli/job_submit.h"
#include "common/status.h"

namespace tide::cli {

// Fills the "template" of `batch` (a batch file's JSON) from the command
// line, so a file of trials alone (experiment_batch, max_concurrent, jobs)
// runs once the user says what to run:
//
//   tide batch submit seed.json -- python3 train.py --lr {learning_rate}
//   tide batch submit seed.json --template spec.yaml --gpus 2
//
// `template_file` is the JSON of a --template job spec, or null. It takes
// the place of a template the file lacks (a file with one and --template is
// refused: which one is meant?); then the flags and the command after "--"
// are written over it, as `tide submit` writes them over a spec file.
// Fails naming "template" when nothing says what to run.
Status MergeBatchTemplate(const nlohmann::json* template_file, const SubmitFlags& flags,
                          nlohmann::json* batch);

// The columns of `tide batch results`: trial, the parameters, status,
// attempts, cost, the metrics. A parameter and a metric of one name, or one
// named like a fixed column, get "param." and "metric." in front, so no two
// columns share a name.
std::vector<std::string> BatchResultsHeader(const std::set<std::string>& params,
                                            const std::set<std::string>& metrics);

}  // namespace tide::cli
