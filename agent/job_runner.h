// JobRunner: one attempt of one job on this node, from assignment to the
// acknowledged "exited" event.
//
// Two threads per attempt, so a slow or absent server never stalls the job:
//   control   prepares the sandbox (work/ with the code, output/,
//             checkpoint/), starts the process, pumps its output into the
//             local log file, enforces max_runtime and stop orders (notice
//             file, SIGTERM, grace, kill of the whole tree). No network once
//             the process runs.
//   reporter  talks to the server through ServerLink (job_reporter.h):
//             "running", the log and the metric lines (every 200 ms, or at
//             256 KiB), periodic checkpoints; once the process is gone the
//             rest of the log, the final checkpoint, the outputs and
//             "exited", each retried with backoff (up to 2 s apart) until
//             acknowledged. So the checkpoint a stop order gave the job the
//             chance to write is on the server before the attempt ends.
// The environment and directories come from job_env.h; what the threads
// share is AttemptState (attempt.h).
// A 404 or 409 for the job means the server no longer wants it: the runner
// stops retrying and kills the job at once.
//
// Thread safety: all public methods may be called from any thread.
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "agent/attempt.h"
#include "agent/job_env.h"
#include "agent/job_reporter.h"
#include "agent/runtime/runtime.h"
#include "api/types.h"

namespace tide::agent {

class JobRunner {
 public:
  // `gang`: this node's rank in a multi-node job (the default for others).
  JobRunner(api::Job job, RunnerDeps deps, api::Gang gang = {});
  ~JobRunner();  // abandons and joins if still running

  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  void Start();

  // A stop order (cancel, preemption, timeout, agent shutdown): notice file,
  // SIGTERM, `grace_s` seconds, then the whole tree is killed. The first
  // reason is the one reported; a later order can only shorten the grace.
  void Stop(const std::string& reason, int64_t grace_s);

  // Stops talking to the server (no more retries) and kills the job at once.
  // Used when the agent must exit without the server's acknowledgement.
  void Abandon();

  // True once the exited event is acknowledged (or the job was rejected or
  // abandoned) and both threads are done. Then the runner can be destroyed.
  bool done() const { return state_.done.load(); }
  // True once the job's processes are gone (or never started).
  bool process_finished() const { return state_.process_finished.load(); }

  const std::string& job_id() const { return job_.id; }
  int attempt() const { return job_.attempt; }
  const std::vector<int>& gpus() const { return job_.gpus; }
  const std::map<std::string, std::string>& env() const { return job_.spec.env; }
  int64_t grace_s() const { return job_.spec.grace_s; }

 private:
  void ControlMain();

  // Sets up the attempt directory and the launch spec. An error is for the
  // user (reported as start_failed).
  Status Prepare(LaunchSpec* spec);
  // Fills checkpoint/ with the newest checkpoint the server acknowledged.
  Status RestoreCheckpoint();
  // Calls `fetch` until it succeeds, is refused, a stop is ordered or a
  // minute passes (a server restart).
  Result<std::string> FetchPatiently(const std::function<Result<std::string>()>& fetch);
  // Watches the process launched at `start` (monotonic ms): its output,
  // stop orders, max_runtime, its exit.
  void RunProcess(Process* process, int64_t start);
  void BeginStop(Process* process, const std::string& reason, int64_t grace_s);
  // Appends a line of the agent's own to the job's log ("tide: ...").
  void LogLine(const std::string& line);

  api::Job job_;
  api::Gang gang_;
  RunnerDeps deps_;
  JobPaths paths_;
  AttemptState state_;
  JobReporter reporter_{job_, paths_, deps_, &state_};

  std::thread control_thread_;
  std::thread reporter_thread_;
};

}  // namespace tide::agent
