// What the load programs share: starting `tide server` and `tide agent` as
// child processes with their output in a log file, and stopping them by
// pid (never by name).
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "api/client.h"
#include "common/status.h"

namespace tide::bench {

// Starts argv[0] with stdout and stderr in `log` (truncated). Returns its pid.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log, bool append = false);
// SIGTERM, then SIGKILL after 10 s; reaps it.
void Stop(pid_t pid);
// SIGKILL at once; reaps it.
void Kill(pid_t pid);
// Waits (up to 10 s) for the server behind `probe` to answer, then reads
// the admin token it wrote in `data_dir`; the error says to read `log`.
Result<std::string> AwaitServer(api::Client& probe, const std::string& data_dir,
                                const std::string& log);
// The folder of this program's binary (build/bench).
std::string ThisProgramsDir();
// The `tide` binary next to this program's folder (build/bench/../tide).
std::string DefaultTideBinary();
// The p-th percentile (0-100) of `v`; 0 for an empty one.
double Percentile(std::vector<double> v, double p);

// The median of one figure over several rounds; 0 for no rounds.
template <typename Figures>
double Median(std::vector<Figures> rounds, double Figures::*field) {
  if (rounds.empty()) return 0;
  std::sort(rounds.begin(), rounds.end(),
            [&](const Figures& a, const Figures& b) { return a.*field < b.*field; });
  const size_t n = rounds.size();
  return n % 2 ? rounds[n / 2].*field : (rounds[n / 2 - 1].*field + rounds[n / 2].*field) / 2;
}

// A load program's command line, "--flag value" pairs. `set` takes one pair
// and returns false for a flag or value it does not know. Returns -1 when
// the program should go on; otherwise the exit code: 0 after --help (or -h)
// printed `usage`, 2 after an error that names the flag.
int ParseFlags(int argc, char** argv, const char* usage,
               const std::function<bool(const std::string& flag, const std::string& value)>& set);

}  // namespace tide::bench
