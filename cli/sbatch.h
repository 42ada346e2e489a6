// `tide sbatch`: the pure part (its command line), exposed for tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tide::cli {

// How much of the submit directory `tide sbatch` uploads when it is not
// told which (--code DIR or --no-code).
inline constexpr int64_t kSbatchCodeLimitBytes = 100LL << 20;  // 100 MiB

// `tide sbatch [OPTIONS] SCRIPT [ARGS]`: Tide's own options (--code DIR,
// --code=DIR, --no-code) and sbatch's, in any order, before the script;
// everything after the script is its arguments.
struct SbatchCommandLine {
  std::vector<std::string> options;  // sbatch's, as given ("-N", "2", "--time=5")
  std::string script;
  std::vector<std::string> script_args;
  std::string code_dir = ".";  // the submit directory; "" with --no-code
  bool code_chosen = false;    // --code or --no-code was given
};

// Fails (kInvalidArgument) without a script, for --code without a
// directory, and for --code with --no-code.
Result<SbatchCommandLine> ParseSbatchCommandLine(const std::vector<std::string>& words);

}  // namespace tide::cli
