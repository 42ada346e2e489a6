// `tide agent`: runs on a GPU machine, joins a server, runs its jobs.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tide::agent {

class ServerLink;

struct AgentOptions {
  std::string server = "http://127.0.0.1:7460";
  std::string join_token;  // needed the first time; then DATA_DIR/node.token is used
  // How an https:// server is trusted: a CA file, pins (--pin), and the
  // pins a join token carries, kept in DATA_DIR/server.pins for later starts.
  std::string ca_file;
  std::vector<std::string> pins;
  std::string data_dir = ".tide/agent";
  std::string name;       // default: the host name
  std::string fake_gpus;  // "4xRTX4090:24GB,2xA100:80GB"; empty = NVML
  // Node labels jobs can require with `constraints` (region=eu, ...).
  std::map<std::string, std::string> labels;
  // Where the other nodes of a gang job reach this one (MASTER_ADDR); empty:
  // the address the server sees this agent connect from.
  std::string advertise_addr;
  // The provider's ask per GPU model, micro-credits per GPU-hour (models not
  // listed are sold at the operator's list price).
  std::map<std::string, int64_t> prices;
  // What the host offers jobs besides its GPUs: CPUs and memory (MiB) that
  // jobs' resources.cpus and resources.memory are placed against. 0: the
  // whole host (its online CPUs, its physical memory).
  double cpus = 0;
  int64_t memory_mb = 0;
  int64_t heartbeat_interval_ms = 2'000;
  // How often a running job's changed TIDE_CHECKPOINT_DIR is uploaded (a
  // job's own checkpoint_interval wins); it is also uploaded after every
  // notice, before the attempt is reported over.
  int64_t checkpoint_interval_ms = 300'000;
  // Processes and threads one job may have at once (its cgroup's pids.max).
  int64_t job_pids_limit = 4096;
  // How jobs run (docs/security.md):
  //   sandbox  bubblewrap, a uid of its own from `job_uids`, seccomp, only
  //            its GPUs' devices, no network unless the job asks (default);
  //   process  plain processes as the agent's user, seeing the whole host:
  //            for development, refused without insecure_process_runtime;
  //   oci      runc containers over the `images` the provider prepared, each
  //            contained like the sandbox (agent/runtime/oci.h).
  std::string runtime = "sandbox";
  // --image NAME=ROOTFS: with --runtime oci, the images this agent offers
  // (jobs pick one with `image: NAME`); "host" is not offered then.
  std::vector<std::string> images;
  bool insecure_process_runtime = false;
  std::string job_uids = "2000000000-2000065535";  // FIRST-LAST, no user's
  std::string uid_lock_dir = "/run/tide/job-uids";   // claims shared by agents of a host
  std::string gpu_dev_root = "/dev";               // where /dev/nvidia* are
  std::string log_level = "info";

  // Talks to the server through this link instead of HTTP to `server`
  // (tests: testing/fake_server.h). Not owned. The agent's detached poll
  // thread may still be inside PollWork when RunAgent returns: the link
  // must outlive that call.
  ServerLink* server_link = nullptr;

  // When the agent runs inside another process (`tide dev`, tests): the agent
  // stops, like on SIGTERM, once *stop becomes true. Not owned.
  const std::atomic<bool>* stop = nullptr;
  // Block SIGINT/SIGTERM and wait for them (the `tide agent` process). Turn
  // off when the host process handles signals itself and sets `stop`.
  bool handle_signals = true;
  // After a stop, how long jobs that have ended may still spend reporting
  // to an unreachable server before the agent gives up and exits.
  int64_t shutdown_report_timeout_ms = 10'000;
};

// Runs until SIGINT or SIGTERM (or *options.stop). Running jobs are stopped
// with their grace period and reported (reason "agent_shutdown"); a second
// signal kills them at once. Returns the process exit code: 0 after a clean
// stop, 1 if the agent could not start (bad options, no GPUs source, server
// refused the tokens) or the server revoked the node token.
int RunAgent(const AgentOptions& options);

}  // namespace tide::agent
