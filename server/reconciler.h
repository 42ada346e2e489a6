// Reconciler: what the agents say against what the server leased them.
// Registrations, heartbeats (what an agent runs, against its leases),
// GPU telemetry into Telemetry, silent nodes (lost after the node timeout), job events (a job or one
// rank of a gang running or exited), checkpoints, and drains.
//
// Not thread-safe on its own: the core's state lock guards it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "api/types.h"
#include "common/clock.h"
#include "server/job_state.h"
#include "server/telemetry.h"

namespace tide::server {

struct ReconcilerOptions {
  int64_t node_timeout_ms = 10'000;
  // A job whose agent stops reporting it for this long after it started is
  // considered lost by the agent and is requeued.
  int64_t report_grace_ms = 10'000;
};

class Reconciler {
 public:
  Reconciler(Clock* clock, JobState* jobs, Delivery* delivery, Telemetry* telemetry,
             ReconcilerOptions options)
      : clock_(clock), jobs_(jobs), delivery_(delivery), telemetry_(telemetry), options_(options) {}

  // A node (re)registers: its GPUs, labels, images and host resources.
  void Register(NodeEntry& n, const api::RegisterRequest& req);
  // Telemetry (the node's GPUs, and those of each running job it reports),
  // and what the agent runs against its leases: stop orders for what it
  // should not run, requeues for what it lost.
  Status Heartbeat(const std::string& node_id, const api::Heartbeat& hb, api::AgentWork& work);
  // Nodes silent for the node timeout are lost; their jobs are requeued.
  void LoseSilentNodes();
  // The job (or the rank on `node_id`) reports `ev`.
  Status JobEvent(const std::string& node_id, const std::string& job_id, const api::JobEvent& ev);
  // Attempt `attempt` of `job_id` uploaded a checkpoint of `bytes`: if the
  // attempt is still the node's, `commit` puts it in place and the job
  // records it.
  Status Checkpoint(const std::string& node_id, const std::string& job_id, int attempt,
                    int64_t bytes, const std::function<Status()>& commit);
  // The rank `node_id` runs (or ran, for `attempt`) of `job_id`; see
  // Core::CheckAgentJob.
  Result<int> AgentRank(const std::string& node_id, const std::string& job_id, int attempt,
                        bool current_only) const;
  // Draining: the node takes no new jobs; with `evict` its jobs get the
  // notice (node_draining) and are requeued.
  Result<api::Node> Drain(const std::string& id_or_name, bool draining, bool evict);
  // The operator revoked the node's credentials: it is lost at once and
  // its jobs return to the queue (reason node_revoked) to run elsewhere;
  // nothing it reports is accepted again.
  Result<api::Node> Revoke(const std::string& id_or_name);

 private:
  // Marks the node lost and hands each job it holds to LosePart(reason).
  void Lose(NodeEntry& n, const std::string& reason);
  // Whether the lease of `node_id` holds `attempt` of the job.
  bool Leased(const std::string& node_id, const JobEntry& e, int attempt) const;

  Clock* clock_;
  JobState* jobs_;
  Delivery* delivery_;
  Telemetry* telemetry_;
  ReconcilerOptions options_;
};

}  // namespace tide::server
