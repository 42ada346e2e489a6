// What one attempt's two threads share (job_runner.h): the control thread
// that runs the job and the reporter (job_reporter.h) that tells the server.
//
// Thread safety: the fields under "guarded by mu" only with mu held; the
// atomics from anywhere; log_fd and checkpoint_sent are written by the
// control thread before it sets `started` or `outcome_ready`, and
// checkpoint_sent afterwards only by the reporter.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "agent/job_env.h"
#include "agent/runtime/runtime.h"
#include "agent/server_link.h"
#include "api/types.h"
#include "common/clock.h"

namespace tide::agent {

struct RunnerDeps {
  ServerLink* server = nullptr;  // not owned; outlives the runner
  std::string data_dir;
  Runtime* runtime = nullptr;       // not owned; outlives the runner
  std::vector<std::string> images = {"host"};  // what the runtime runs
  std::vector<api::Gpu> node_gpus;  // as discovered
  const Clock* clock = SystemClock::Default();
  // Retry backoff bounds for server calls.
  int64_t min_backoff_ms = 100;
  int64_t max_backoff_ms = 2'000;
  int64_t ship_interval_ms = 200;
  // How often a changed TIDE_CHECKPOINT_DIR is uploaded while the job runs
  // (the job's checkpoint_interval wins).
  int64_t checkpoint_interval_ms = 300'000;
  std::string node_name;  // SLURMD_NODENAME
  int64_t pids_limit = 4096;  // per job, where the runtime has cgroups
};

struct AttemptState {
  // A stop order: the first reason is kept, a later order can only shorten
  // the grace. Wakes both threads.
  void Stop(const std::string& reason, int64_t grace_s);
  // Sleeps `ms`, or less once abandoned.
  void SleepUnlessAbandoned(int64_t ms);
  bool stop_ordered_now();

  std::mutex mu;
  std::condition_variable cv;
  // Stop order (guarded by mu).
  std::string stop_reason;
  int64_t stop_grace_s = -1;  // -1: none
  bool stop_ordered = false;  // an order is waiting for the control thread
  // Control -> reporter (guarded by mu).
  bool started = false;  // the process runs: report "running"
  bool outcome_ready = false;
  api::JobEvent outcome;
  bool ship_now = false;

  int log_fd = -1;
  std::string checkpoint_sent;  // fingerprint of what the server holds
  // The uid the job runs as (-1: the agent's): its files are read with its
  // rights. Set by the control thread before the reporter reads files.
  std::atomic<int64_t> job_uid{-1};
  std::atomic<int64_t> log_written{0};
  std::atomic<bool> abandoned{false};
  std::atomic<bool> rejected{false};
  std::atomic<bool> process_finished{false};
  std::atomic<bool> done{false};
  // The server acknowledged the exit (with the log, outputs and checkpoint
  // before it), or no longer wants the attempt: its directory goes.
  std::atomic<bool> wipe{false};
};

// The server no longer wants the job (404, 409).
bool IsRejection(const Status& st);
// Errors that no retry can fix (400, 403, 413).
bool IsPermanent(const Status& st);

// Names, sizes and modification times of everything under `dir`: two equal
// fingerprints mean nothing was written in between. "" for an empty or
// missing directory.
std::string CheckpointFingerprint(const std::string& dir);

}  // namespace tide::agent
