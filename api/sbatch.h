// sbatch translation: an existing Slurm batch script, unchanged, as a Tide
// job. The directives (#SBATCH lines, then options given on the command
// line, which win) become a typed JobSpec, or for --array a BatchSpec; what
// Tide cannot honour is listed, as a warning when it cannot change the
// result and as a refusal, naming the line, when it would. docs/slurm.md
// has the whole mapping; `tide sbatch` (cli/sbatch.cc) submits the plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "api/batch.h"
#include "api/types.h"
#include "common/status.h"

namespace tide::api {

// Where the script travels in the job's code archive, below the copy of
// the submit directory ($SLURM_SUBMIT_DIR), as sbatch keeps its copy of a
// script apart from the submit directory.
inline constexpr const char* kSbatchScriptDir = ".tide/sbatch";

struct SbatchPlan {
  // The job; for an array, what every task runs. `code` is left for the
  // caller: the archive of the submit directory with the script at
  // `script_in_code`.
  JobSpec spec;
  std::string script_in_code;  // ".tide/sbatch/train.sh"
  // An array: the batch to submit instead (its template is `spec`, with
  // Slurm's array variables).
  bool array = false;
  BatchSpec batch;
  std::vector<std::string> warnings;  // "script.sh:3: --mail-type: ignored (...)"
  bool parsable = false;              // --parsable among the directives or options
};

// `script` is the file's text, `filename` its name (for messages and the
// default job name), `cli_options` what came before the script on the
// command line, `script_args` what came after it. Errors are
// kInvalidArgument and start with "FILE:LINE: --option:" ("command line"
// for an option given there).
Result<SbatchPlan> PlanSbatch(const std::string& script, const std::string& filename,
                              const std::vector<std::string>& cli_options,
                              const std::vector<std::string>& script_args);

// --dependency: "afterok:ID[:ID...][,afterany:ID...]" (afterok, afterany,
// afternotok) appended to `out`. With `bare_id_is_afterok` a plain "ID" means
// afterok:ID (what `tide submit --depends-on ID` takes). Messages name the
// part that cannot be honoured; the caller names the option.
Status ParseSlurmDependency(const std::string& text, bool bare_id_is_afterok,
                            std::vector<JobSpec::Dependency>* out);

// Slurm's --time: "MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM",
// "D-HH:MM:SS"; 0 seconds for UNLIMITED.
Result<int64_t> ParseSlurmTime(const std::string& text);

// --array: "0-9", "1,3,5-7", "0-15:4", with "%N" for the concurrency cap.
Status ParseSlurmArray(const std::string& text, std::vector<int>* tasks, int* max_concurrent);

// Whether a command-line word ("-t", "--time") is an sbatch option whose
// value is the next word (it is not for "--time=5", "-t5" or a flag).
bool SbatchOptionTakesNextWord(const std::string& word);

}  // namespace tide::api
