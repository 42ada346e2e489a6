// The pieces of sbatch translation (sbatch.h) that read options: the
// table of sbatch's options, directive lines split into words and options,
// and the value formats (sizes, file name patterns). Internal to api/.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace tide::api::sbatch {

// One option, from a directive line (line > 0) or the command line (0).
struct Opt {
  std::string name;  // long name, without dashes
  std::string value;
  int line = 0;
};

// Slurm's options: short letter (0 = none), whether a value follows.
struct OptInfo {
  char letter;
  bool value;
};
const std::map<std::string, OptInfo>& Options();

// "train.sh:3", or "command line" for line 0.
std::string Where(const std::string& file, int line);

// Splits a directive or command-line words into options; errors name the
// line and the option.
Status ReadOptions(const std::vector<std::string>& words, int line, const std::string& file,
                   std::vector<Opt>* out);
// A directive's text as shell-like words (quotes, a trailing comment).
std::vector<std::string> Words(const std::string& text);
// "a,b,,c" split at `sep`: {"a", "b", "", "c"}.
std::vector<std::string> Split(const std::string& text, char sep);

Result<int> PositiveInt(const std::string& text, const std::string& what);
// Slurm sizes: a number with an optional K, M (default), G or T.
Result<int64_t> SlurmMemoryMb(const std::string& text, const std::string& what);
// A bash expression for a Slurm file name pattern (%j, %x, %A, %a, ...),
// expanded when the job runs.
Result<std::string> PatternExpression(const std::string& pattern, const std::string& what);
// A path for the job's outputs: relative, no ".."; an absolute one keeps
// its file name, with a warning.
Result<std::string> OutputPath(const std::string& pattern, const std::string& what,
                               std::vector<std::string>* warnings, const std::string& where);
// Doubles braces, which a batch template reads as parameters.
std::string EscapeBraces(const std::string& s);

}  // namespace tide::api::sbatch
