// What the scheduler sees: an immutable snapshot of nodes, running jobs,
// the queue, account usage and the policy configuration. The server builds
// one from its in-memory state; the trace simulator builds one per event.
//
// Units: time in unix milliseconds (or virtual milliseconds in a replay),
// service in GPU-seconds, prices in micro-credits per GPU-hour.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tide::sched {

// On-demand work is never preempted for spot work; spot yields to it.
enum class Tier : uint8_t { kOnDemand = 0, kSpot = 1 };
const char* TierName(Tier t);

enum class Policy : uint8_t {
  kFifo,       // submit order (the baseline)
  kFair,       // tier, fair share between accounts, priority, submit order
  kTide,       // kFair with least-attained-service levels inside each account
  kSjfOracle,  // shortest known duration first (simulation only: needs the future)
};
const char* PolicyName(Policy p);
// "fifo", "fair", "tide", "sjf-oracle"; false if unknown.
bool ParsePolicy(const std::string& name, Policy* out);

enum class PlacementOrder { kPriceFirst, kPackFirst };

struct SchedulerConfig {
  Policy policy = Policy::kTide;
  // Let later jobs start ahead of a blocked one when they cannot delay its
  // reservation (EASY backfill). Off: a blocked job holds every node it could
  // use, strict order.
  bool backfill = true;
  // How many blocked jobs, in order, get a reservation in one pass. Jobs
  // beyond it wait without holding anything (as Slurm's bf_max_job_test).
  int max_reservations = 64;
  // Planning stand-in for a job without max_runtime: when it is expected to
  // end, for reservations only. 0 = never (its GPUs are not counted on).
  int64_t default_runtime_ms = 0;
  // Preemption: on-demand jobs may preempt spot jobs. Under kTide also jobs
  // at a lower service level may preempt preemptible jobs at a higher one.
  bool preemption = true;
  // Least-attained-service levels (kTide): a job whose attained GPU-seconds
  // reach thresholds[i] moves to level i+1. Ascending.
  std::vector<int64_t> las_thresholds_gpu_s = {60, 600, 3'600, 36'000};
  // A queued job may preempt for its service level only after waiting this
  // long: on a cluster where GPUs come free soon anyway, stopping work (and
  // paying its restart) gains nothing. Tier preemption does not wait.
  int64_t las_preempt_after_ms = 300'000;
  // A job that has waited this many times its last run length (and at least
  // starvation_min_ms) is promoted to level 0 (Tiresias' STARVELIMIT).
  // 0 = off.
  double starvation_factor = 0;
  int64_t starvation_min_ms = 0;
  // Tie-break among equally good nodes; same seed and input, same plan.
  uint64_t seed = 0;
  // Which node a job takes among those that can hold it now. Price first
  // (the server's rule: a consumer never pays above the cheapest free node
  // that fits; best fit breaks ties of price), or pack first (best fit,
  // then price), kept so that `tide sim --placement` can show what paying
  // less costs in fragmentation.
  PlacementOrder placement = PlacementOrder::kPriceFirst;
};

struct GpuSlot {
  int index = 0;
  std::string model;  // canonical ("RTX4090", "A100")
  int64_t memory_mb = 0;
  bool free = true;
};

struct NodeView {
  std::string id;
  std::string name;
  bool schedulable = true;  // false for lost nodes
  bool draining = false;    // keeps its jobs, takes no new ones
  std::vector<GpuSlot> gpus;
  // Host resources; 0 total = not reported (no CPU or memory limit applies).
  double cpus = 0;
  double cpus_free = 0;
  int64_t memory_mb = 0;
  int64_t memory_free_mb = 0;
  std::map<std::string, std::string> labels;  // region, data_residency, vc, ...
  std::vector<std::string> images = {"host"};  // what its agent can run jobs in
  int64_t price = 0;         // micro-credits per GPU-hour; 0 = free
  double reliability = 1.0;  // 0..1, higher is better (completed / started)
};

// A placement of a job: GPU indices on one node (several nodes for a gang).
struct NodeAlloc {
  std::string node_id;
  std::vector<int> gpus;  // ascending
};

struct RunningJob {
  std::string id;
  std::string account;
  Tier tier = Tier::kOnDemand;
  int priority = 0;
  std::vector<NodeAlloc> allocs;
  int64_t started_at = 0;
  // When it is expected to end: start + max_runtime, or 0 if unknown.
  int64_t expected_end = 0;
  // GPU-seconds received so far, this attempt and earlier ones.
  int64_t attained_gpu_s = 0;
  int64_t last_checkpoint = 0;  // 0 = never checkpointed
  // May be stopped for a job at a lower service level (kTide). Spot jobs
  // may always be stopped for on-demand jobs.
  bool preemptible = false;
  // Already told to stop (a preemption or cancel in progress): its GPUs are
  // about to be free and it is not chosen as a victim again.
  bool stopping = false;
};

struct PendingJob {
  std::string id;
  std::string account;
  Tier tier = Tier::kOnDemand;
  int priority = 0;  // higher first
  int nodes = 1;     // a gang of `nodes` nodes, `gpu_count` GPUs on each
  int gpu_count = 1;
  std::vector<std::string> gpu_types;  // canonical; empty = any
  int64_t gpu_memory_mb = 0;           // minimum per GPU; 0 = any
  double cpus = 0;                     // per node; 0 = unspecified
  int64_t memory_mb = 0;               // per node; 0 = unspecified
  std::map<std::string, std::string> constraints;  // node labels that must hold
  std::string image = "host";                      // the node must offer it
  int64_t max_price = 0;    // micro-credits per GPU-hour; 0 = no cap
  int64_t max_runtime_ms = 0;  // 0 = none
  int64_t submitted_at = 0;    // ties broken by id
  int64_t queued_since = 0;    // when it last entered the queue
  int64_t last_run_ms = 0;     // length of its last attempt (starvation rule)
  int64_t attained_gpu_s = 0;  // service in earlier attempts
  // Known duration, for kSjfOracle only (a replay knows the future).
  int64_t oracle_duration_ms = 0;
};

struct AccountShare {
  double weight = 1.0;
  double usage_gpu_s = 0;  // decayed GPU-seconds (see fair_share.h)
};

struct ScheduleInput {
  const std::vector<NodeView>& nodes;
  const std::vector<PendingJob>& queue;  // any order; ranked inside
  const std::vector<RunningJob>& running = kNoRunning;
  const std::map<std::string, AccountShare>& accounts = kNoAccounts;
  const SchedulerConfig& config = kDefaultConfig;
  int64_t now_ms = 0;

  static const std::vector<RunningJob> kNoRunning;
  static const std::map<std::string, AccountShare> kNoAccounts;
  static const SchedulerConfig kDefaultConfig;
};

}  // namespace tide::sched
