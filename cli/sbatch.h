// `tide sbatch`: runs an existing Slurm batch script unchanged. The
// directives (#SBATCH lines, then options given on the command line, which
// win) become a job spec, or for --array a batch; what Tide cannot honour
// is listed, as a warning when it cannot change the result and as a
// refusal when it would. docs/slurm.md has the whole mapping.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "common/status.h"

namespace tide::cli {

struct SbatchPlan {
  // The job spec; for an array, the template of the batch. "code" is left
  // for the caller (the archive holding the script).
  nlohmann::json spec;
  // An array: the batch file to submit instead, with `spec` as template.
  bool array = false;
  nlohmann::json batch;
  std::vector<std::string> warnings;  // "script.sh:3: --mail-type: ignored (...)"
  bool parsable = false;              // --parsable among the directives or options
};

// `script` is the file's text, `filename` its name (for messages and the
// default job name), `cli_options` what came before the script on the
// command line, `script_args` what came after it.
Result<SbatchPlan> PlanSbatch(const std::string& script, const std::string& filename,
                              const std::vector<std::string>& cli_options,
                              const std::vector<std::string>& script_args);

// Slurm's --time: "MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM",
// "D-HH:MM:SS"; 0 seconds for UNLIMITED.
Result<int64_t> ParseSlurmTime(const std::string& text);

// --array: "0-9", "1,3,5-7", "0-15:4", with "%N" for the concurrency cap.
Status ParseSlurmArray(const std::string& text, std::vector<int>* tasks, int* max_concurrent);

}  // namespace tide::cli
