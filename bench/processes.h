// What the load programs share: starting `tide server` and `tide agent` as
// child processes with their output in a log file, and stopping them by
// pid (never by name).
#pragma once

#include <sys/types.h>

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
// The `tide` binary next to this program's folder (build/bench/.. /tide).
std::string DefaultTideBinary();
// The p-th percentile (0-100) of `v`; 0 for an empty one.
double Percentile(std::vector<double> v, double p);

}  // namespace tide::bench
