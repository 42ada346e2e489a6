// Wire types of the Tide API: job specs, jobs, nodes and the agent protocol.
//
// Each type has ToJson() and a strict FromJson() that names the offending
// field on error (see common/json_reader.h). These are the shapes documented
// in docs/api.md and docs/spec.md; the server also uses Job and Node as its
// in-memory records.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tide::api {

using nlohmann::json;

// --- limits (documented in docs/api.md) ---
inline constexpr size_t kMaxRequestBody = 1 << 20;            // JSON bodies: 1 MiB
inline constexpr size_t kMaxUploadBody = 256 << 20;           // code archives, outputs: 256 MiB
inline constexpr size_t kMaxLogChunk = 4 << 20;               // one agent log chunk: 4 MiB
inline constexpr size_t kMaxBatchBody = 16 << 20;             // one batch file: 16 MiB
inline constexpr int kMaxGpuCount = 64;
inline constexpr int kMaxNodes = 64;  // nodes of one gang job
inline constexpr size_t kMaxNameLength = 128;
inline constexpr size_t kMaxCommandArgs = 4096;

enum class JobStatus : uint8_t { kQueued, kStarting, kRunning, kCompleted, kFailed, kCancelled };
const char* JobStatusName(JobStatus s);
std::optional<JobStatus> ParseJobStatus(const std::string& s);
bool IsTerminal(JobStatus s);

// "NVIDIA GeForce RTX 4090" -> "RTX4090", "NVIDIA A100-SXM4-80GB" -> "A100",
// "rtx 4090" -> "RTX4090", "H100" -> "H100". Used on both the node's model
// and the job's requested type, so they compare by equality.
std::string CanonicalGpuModel(const std::string& name);

// "24GB", "24G", "24576MB", "80GiB" -> MiB. A bare number means MiB.
Result<int64_t> ParseMemoryMb(const std::string& text);

struct Resources {
  // A gang: `nodes` nodes started together, `gpu_count` GPUs on each
  // (`gpus_per_node` in a spec is the same field).
  int nodes = 1;
  int gpu_count = 1;
  std::vector<std::string> gpu_types;  // canonical models; empty = any
  int64_t gpu_memory_mb = 0;           // minimum per GPU; 0 = any
  double cpus = 0;                     // 0 = unspecified
  int64_t memory_mb = 0;               // 0 = unspecified
};

struct JobSpec {
  std::string name;
  std::string image = "host";
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  // Given to the job as environment like `env`, but never shown: the API
  // and the job's record carry only their names, the server keeps the
  // values in a table of their own until the job ends, and the agent masks
  // them in the job's log (docs/security.md, "Secrets").
  std::map<std::string, std::string> secrets;
  Resources resources;
  int64_t max_runtime_s = 0;  // 0 = no limit
  int64_t grace_s = 30;       // notice before SIGKILL on cancel/timeout
  std::string code;           // id of an uploaded code archive ("" = none)
  std::vector<std::string> tags;
  // Scheduling: spot work is cheaper and yields to on-demand work
  // (preempted with the notice protocol, then requeued).
  std::string tier = "on-demand";  // "on-demand" or "spot"
  int priority = 0;                // -1000..1000, higher first within an account
  std::map<std::string, std::string> constraints;  // node labels that must hold
  int64_t max_price = 0;  // micro-credits per GPU-hour; 0 = no cap
  // Hard cap on what the job may cost in all (micro-credits); 0 = none:
  // then price x GPUs x max_runtime, or the account's default cap.
  int64_t max_cost = 0;
  // Failures of the job itself (a non-zero exit or a signal) that are run
  // again as a new attempt; preemptions and lost nodes never count.
  int retry_times = 0;
  // How often the agent uploads TIDE_CHECKPOINT_DIR while the job runs;
  // 0 = the agent's default. It is also uploaded after every notice.
  int64_t checkpoint_interval_s = 0;
  // Sets the SLURM_* variables a Slurm batch script expects (tide sbatch).
  bool slurm = false;
  // Outbound network for the job; without it the sandbox has only its own
  // loopback. Gangs (nodes > 1) have it unless they say otherwise.
  bool network = false;
  // Jobs that must end first: the job waits until the condition holds, and
  // is cancelled (reason dependency_never_satisfied) once it cannot.
  struct Dependency {
    std::string condition;  // afterok, afterany, afternotok
    std::string job;
  };
  std::vector<Dependency> depends_on;
};
inline constexpr int kMaxPriority = 1000;
inline constexpr int kMaxRetryTimes = 100;
inline constexpr size_t kMaxDependencies = 64;
inline constexpr size_t kMaxSecrets = 64;
inline constexpr size_t kMaxSecretBytes = 64 << 10;
// Secrets shorter than this are given to the job but not masked in its log:
// masking every "1" or "ab" would mangle the log and hide nothing.
inline constexpr size_t kMinMaskedSecret = 4;

// Strict parse of a client's spec (JSON body of POST /v1/jobs).
Result<JobSpec> JobSpecFromJson(const json& j);
// With the secrets' values: what a client submits and an agent is handed.
json ToJson(const JobSpec& spec);
// The names of a spec's secrets, for records and answers ("secrets": [...]).
json SecretNames(const std::map<std::string, std::string>& secrets);

// One node of a gang attempt; its index in Attempt::ranks is its rank.
struct Rank {
  std::string node_id;
  std::vector<int> gpus;
  int64_t rate = 0;         // micro-credits per GPU-hour on this node
  int64_t started_at = 0;   // unix ms the agent reported it running
  int64_t finished_at = 0;  // unix ms it exited (or the attempt ended)
  std::string reason;
  std::optional<int> exit_code;
};
json ToJson(const Rank& r);

struct Attempt {
  int attempt = 0;
  std::string node_id;  // rank 0's node for a gang
  std::vector<int> gpus;
  int64_t rate = 0;         // micro-credits per GPU-hour, fixed at placement
  int64_t started_at = 0;   // unix ms
  int64_t finished_at = 0;  // unix ms
  std::string reason;
  std::optional<int> exit_code;
  // Gangs only (resources.nodes > 1): every node of the attempt and where
  // rank 0 listens for the others (MASTER_ADDR, MASTER_PORT).
  std::vector<Rank> ranks;
  std::string master_addr;
  int master_port = 0;
};
// GPU-seconds an attempt used: to its end, or to `now` while it runs. Each
// rank of a gang counts from its own start to its own exit.
double AttemptGpuSeconds(const Attempt& a, int64_t now);
json ToJson(const Attempt& a);
Result<Attempt> AttemptFromJson(const json& j);

struct Job {
  std::string id;
  std::string owner;  // user id
  JobSpec spec;
  JobStatus status = JobStatus::kQueued;
  std::string reason;          // detail of the status: timeout, exit_code:3, node_lost, ...
  std::string pending_reason;  // while queued: why it is not running yet
  // The reason came from a pass over just the new jobs, which counts the
  // jobs ahead as if the new one ranked last; the next full pass (within a
  // tick) ranks it as `tide queue` shows.
  bool pending_reason_provisional = false;
  int64_t expected_start = 0;  // while queued: when it is expected to start (unix ms), 0 = unknown
  std::optional<int> exit_code;
  int attempt = 1;
  std::string node_id;  // current or last node
  std::vector<int> gpus;
  int64_t created_at = 0;
  int64_t started_at = 0;
  int64_t finished_at = 0;
  bool cancel_requested = false;
  std::string cancel_reason;
  // The scheduler preempted the running attempt: it gets the notice, and on
  // exit the job returns to the queue with attempt+1.
  bool preempt_requested = false;
  // A rank of a gang failed: the other ranks get the notice (reason
  // "gang_failed") and the job ends failed with this reason.
  std::string gang_failure;
  // The attempt must end but the job must run again: a node of a gang was
  // lost or its agent stopped (the other ranks get the notice with this
  // reason), or the node is drained with eviction (node_draining). The job
  // returns to the queue once every rank has stopped.
  std::string requeue_reason;
  std::vector<Attempt> attempts;  // finished attempts and the current one
  // Failed attempts run again under spec.retry_times.
  int retries = 0;
  // A trial of a batch: the batch's id, the trial's id within it and the
  // parameters substituted into the batch's template.
  std::string batch;
  std::string trial;
  std::map<std::string, std::string> params;
  // The newest checkpoint the server holds (0 = none): of which attempt,
  // its size, and when it was acknowledged.
  int checkpoint_attempt = 0;
  int64_t checkpoint_bytes = 0;
  int64_t checkpoint_at = 0;
  // When the job's data was deleted (tide rm, or the server's retention):
  // its logs, outputs, checkpoints and code are gone, and of its spec only
  // what billing needs is left (resources, tier, tags); 0 = not deleted.
  int64_t deleted_at = 0;
};
// What a deleted job keeps of `spec`: its shape and labels, none of the
// consumer's command, environment, secrets, name, code or parameters.
JobSpec DeletedSpec(const JobSpec& spec);
// A job as the API answers it and the store records it: its secrets by name
// only, never their values.
json ToJson(const Job& job);
// Reads back what ToJson wrote (store records, client responses): secrets
// as names (values "") or, in an assignment, names and values.
Result<Job> JobFromJson(const json& j);

struct Gpu {
  int index = 0;
  std::string name;   // as the driver reports it
  std::string model;  // canonical
  int64_t memory_mb = 0;
  std::string uuid;
  int minor = -1;  // device node /dev/nvidia<minor>; -1: the same as index
  // Telemetry from the last heartbeat; -1 = unknown.
  int utilization_pct = -1;
  int64_t memory_used_mb = -1;
  int temperature_c = -1;
};
json ToJson(const Gpu& g);
Result<Gpu> GpuFromJson(const json& j, const std::string& prefix);

enum class NodeState : uint8_t { kReady, kLost };

struct Node {
  std::string id;
  std::string name;
  std::string hostname;
  // Where the other nodes of a gang reach this one (MASTER_ADDR): the
  // agent's --advertise-addr, else the address its registration came from.
  std::string address;
  // The provider (a user id) whose agent this is: it earns what the node's
  // jobs pay, less the platform fee. "" = the operator's own node.
  std::string owner;
  // The provider's ask per GPU model, micro-credits per GPU-hour; models
  // not listed cost the operator's list price.
  std::map<std::string, int64_t> prices;
  NodeState state = NodeState::kReady;
  std::vector<Gpu> gpus;
  std::map<std::string, std::string> labels;  // region, data_residency, ...
  // The images its agent can run jobs in ("host", an OCI image's name);
  // a job's `image` must be one of them.
  std::vector<std::string> images = {"host"};
  std::string runtime = "sandbox";  // how its agent runs jobs: sandbox, process
  // What the host offers jobs besides its GPUs: CPUs and memory in MiB
  // (0 = not reported: no CPU or memory request is checked against it).
  double cpus = 0;
  int64_t memory_mb = 0;
  bool draining = false;  // keeps its jobs, takes no new ones
  int64_t registered_at = 0;
  int64_t last_heartbeat = 0;
};
json ToJson(const Node& n);
Result<Node> NodeFromJson(const json& j);

// --- agent protocol ---

struct RegisterRequest {
  std::string name;
  std::string hostname;
  std::string address;  // "" = the address the request came from
  std::map<std::string, int64_t> prices;  // the provider's ask per GPU model
  std::vector<Gpu> gpus;
  std::map<std::string, std::string> labels;
  std::vector<std::string> images = {"host"};  // what jobs may ask for in `image`
  std::string runtime = "sandbox";
  double cpus = 0;        // the host's CPUs jobs may use; 0 = not reported
  int64_t memory_mb = 0;  // the host's memory jobs may use, MiB; 0 = not reported
};
// Label keys and values: 1-63 characters of [A-Za-z0-9._-]; "" if ok,
// else what is wrong.
std::string CheckLabel(const std::string& key, const std::string& value);
// An image name ("host", "pytorch-2.3", "ghcr.io/org/img:tag"): 1-200
// characters of [A-Za-z0-9._:/@-], not starting with '.', '-' or '/'; "" if
// ok, else what is wrong.
std::string CheckImageName(const std::string& name);
// An agent's advertised address: an IP address or a host name; "" if ok.
std::string CheckAddress(const std::string& address);
json ToJson(const RegisterRequest& r);
Result<RegisterRequest> RegisterRequestFromJson(const json& j);

struct RunningJob {
  std::string job_id;
  int attempt = 0;
};

struct Heartbeat {
  std::vector<Gpu> gpus;            // telemetry
  std::vector<RunningJob> running;  // what the agent is running now
};
json ToJson(const Heartbeat& h);
Result<Heartbeat> HeartbeatFromJson(const json& j);

// This node's part of a gang: the environment torchrun expects.
struct Gang {
  int rank = 0;
  int nnodes = 1;
  std::string master_addr;
  int master_port = 0;
};

// One placement handed to an agent.
struct Assignment {
  Job job;   // includes spec and attempt; node_id and gpus are this node's
  Gang gang;
};

struct CancelOrder {
  std::string job_id;
  int attempt = 0;
  std::string reason;  // cancelled, timeout, node_lost, ...
  int64_t grace_s = 30;
};

// Answer of the assignments long-poll and of a heartbeat.
struct AgentWork {
  std::vector<Assignment> assignments;
  std::vector<CancelOrder> cancels;
  // Heartbeat answers over TLS: the pins of the server's certificate and
  // its next key, which a pinning agent keeps (docs/security.md).
  std::vector<std::string> tls_pins;
  // Heartbeat answers: the node's new token, when its own nears its end
  // (docs/security.md, "Tokens"); the agent saves it and calls with it.
  std::string node_token;
};
json ToJson(const AgentWork& w);
Result<AgentWork> AgentWorkFromJson(const json& j);

// POST /v1/agent/jobs/{id}/events
struct JobEvent {
  int attempt = 0;
  std::string state;  // "running" or "exited"
  std::optional<int> exit_code;
  std::string reason;  // for exited: "" (normal), timeout, cancelled, start_failed, ...
  std::string message;
};
json ToJson(const JobEvent& e);
Result<JobEvent> JobEventFromJson(const json& j);

// {"error": {"code", "message", "field"}}
json ErrorJson(const Status& s);
// Turns an error body back into a Status (for the client side).
Status StatusFromErrorJson(int http_status, const std::string& body);

}  // namespace tide::api
