// JobRunner: one attempt of one job on this node, from assignment to the
// acknowledged "exited" event.
//
// Two threads per attempt, so a slow or absent server never stalls the job:
//   control   prepares the sandbox (work/ with the code, output/,
//             checkpoint/), starts the process, pumps its output into the
//             local log file, enforces max_runtime and stop orders (notice
//             file, SIGTERM, grace, kill of the whole tree). No network once
//             the process runs.
//   reporter  talks to the server: "running", the log and the metric lines
//             (LogShipper, every 200 ms or 256 KiB), the checkpoint every
//             checkpoint interval when it changed; once the process is gone
//             the rest of the log, the final checkpoint, the outputs and
//             "exited", each retried with backoff (up to 2 s apart) until
//             acknowledged. So the checkpoint a stop order gave the job the
//             chance to write is on the server before the attempt ends.
// A 404 or 409 for the job means the server no longer wants it: the runner
// stops retrying and kills the job at once.
//
// Thread safety: all public methods may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/runtime/runtime.h"
#include "api/client.h"
#include "api/types.h"
#include "common/clock.h"

namespace tide::agent {

// Where one attempt lives: DATA_DIR/jobs/<id>/<attempt>/.
struct JobPaths {
  std::string root;
  std::string work;        // cwd of the job, code unpacked here
  std::string output;      // TIDE_OUTPUT_DIR: uploaded when the job ends
  std::string checkpoint;  // TIDE_CHECKPOINT_DIR
  std::string control;     // the agent's, read-only to the job: holds the notice
  std::string notice;      // TIDE_NOTICE_FILE: written before SIGTERM
  std::string metrics;     // TIDE_METRICS_FILE: JSON lines the job appends
  std::string log;         // stdout+stderr, as shipped
};
JobPaths PathsFor(const std::string& data_dir, const std::string& job_id, int attempt);

// The job's environment: spec.env, then the agent's variables (which win):
// CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, NVIDIA_VISIBLE_DEVICES,
// TIDE_GPU_UUIDS, TIDE_JOB_ID, TIDE_ATTEMPT, TIDE_OUTPUT_DIR,
// TIDE_CHECKPOINT_DIR, TIDE_NOTICE_FILE, TIDE_METRICS_FILE, TIDE_RESUMED=1
// on attempts after the first (with TIDE_RESTART_REASON, why the previous
// one ended), a batch trial's TIDE_BATCH, TIDE_TRIAL and TIDE_PARAM_<NAME>,
// and where this node is in the job: TIDE_NODE_RANK, TIDE_NNODES,
// TIDE_GPUS_PER_NODE, and for a gang WORLD_SIZE (all GPUs of the job),
// MASTER_ADDR and MASTER_PORT (rank 0's rendezvous), so `torchrun` needs no
// other setup. With spec.slurm also the SLURM_* variables of a batch
// script (docs/slurm.md).
std::map<std::string, std::string> BuildJobEnv(const api::Job& job, const api::Gang& gang,
                                               const JobPaths& paths,
                                               const std::vector<api::Gpu>& node_gpus,
                                               const std::string& node_name = "");

struct RunnerDeps {
  std::string server;
  std::string node_token;
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
  bool done() const { return done_.load(); }
  // True once the job's processes are gone (or never started).
  bool process_finished() const { return process_finished_.load(); }

  const std::string& job_id() const { return job_.id; }
  int attempt() const { return job_.attempt; }
  const std::vector<int>& gpus() const { return job_.gpus; }
  int64_t grace_s() const { return job_.spec.grace_s; }

 private:
  enum class Call { kOk, kRejected, kAbandoned };

  void ControlMain();
  void ReporterMain();

  // Sets up the attempt directory and the launch spec. An error is for the
  // user (reported as start_failed).
  Status Prepare(LaunchSpec* spec);
  // Fills checkpoint/ with the newest checkpoint the server acknowledged.
  Status RestoreCheckpoint(api::Client* client);
  // Calls `fetch` until it succeeds, is refused, a stop is ordered or a
  // minute passes (a server restart).
  Result<std::string> FetchPatiently(const std::function<Result<std::string>()>& fetch);
  void RunProcess(Process* process);
  void BeginStop(Process* process, const std::string& reason, int64_t grace_s);
  // Calls `fn` until it succeeds, backing off on transient errors. A 404 or
  // 409 marks the job rejected (and kills it); 400/403/413 are logged and
  // count as done; kAbandoned once Abandon() was called.
  Call Retry(const std::string& what, const std::function<Status()>& fn);
  void MarkRejected(const std::string& what, const Status& st);
  Call UploadOutputs(api::Client* client);
  // Uploads checkpoint/ if it changed since the last upload (and held
  // still while it was packed). `final`: retried until acknowledged.
  Call UploadCheckpoint(api::Client* client, bool final);
  void SleepUnlessAbandoned(int64_t ms);

  api::Job job_;
  api::Gang gang_;
  RunnerDeps deps_;
  JobPaths paths_;

  std::thread control_;
  std::thread reporter_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Stop order (guarded by mu_).
  std::string stop_reason_;
  int64_t stop_grace_s_ = -1;  // -1: none
  bool stop_ordered_ = false;  // an order is waiting for the control thread
  // Control -> reporter (guarded by mu_).
  bool started_ = false;  // the process runs: report "running"
  bool outcome_ready_ = false;
  api::JobEvent outcome_;
  bool ship_now_ = false;

  int log_fd_ = -1;
  std::string checkpoint_sent_;  // fingerprint of what the server holds (reporter)
  // The uid the job runs as (-1: the agent's): its files are read with its
  // rights. Set by the control thread before the reporter reads files.
  std::atomic<int64_t> job_uid_{-1};
  std::atomic<int64_t> log_written_{0};
  std::atomic<bool> abandoned_{false};
  std::atomic<bool> rejected_{false};
  std::atomic<bool> process_finished_{false};
  std::atomic<bool> done_{false};
};

}  // namespace tide::agent
