// Delivery: what has been handed to which agent.
//
// An assignment is offered to its node's agent once its lease is durable
// (a placement in the batch being written is held back until the write),
// handed out once per attempt and node, and offered again if the agent
// never takes it up; a stop order is handed out once too. Nothing here is
// durable: after a restart everything in flight is offered again and
// agents deduplicate.
//
// Thread-safe: the agents' long-polls (I/O threads) record what they hand
// out while the core thread forgets attempts that ended; both go through
// this class's own mutex, taken after the core's state lock.
#pragma once

#include <set>
#include <string>

#include "api/types.h"
#include "common/mutex.h"

namespace tide::server {

class JobState;
struct NodeEntry;

class Delivery {
 public:
  // What `node`'s agent has not been handed yet: assignments whose lease is
  // durable, and stop orders. Records them as handed. The caller holds the
  // state lock (shared is enough).
  void Collect(const JobState& jobs, const NodeEntry& node, api::AgentWork& work);

  // The job's current attempt was (or was not yet) handed to `node_id`.
  bool Handed(const std::string& job_id, int attempt, const std::string& node_id) const;
  // Records the hand-out; false if it was already handed.
  bool Hand(const std::string& job_id, int attempt, const std::string& node_id);
  // Records that the stop order went out; false if it already had.
  bool HandStop(const std::string& job_id, int attempt, const std::string& node_id);
  // The agent never took it up: offer the assignment again.
  void OfferAgain(const std::string& job_id, int attempt, const std::string& node_id);
  // The attempt ended on `node_id`: nothing of it is handed out any more.
  void Forget(const std::string& job_id, int attempt, const std::string& node_id);

  // A placement of the batch being written: not offered before it is durable.
  void HoldBack(const std::string& job_id);
  void Unhold(const std::string& job_id);
  bool HeldBack(const std::string& job_id) const;
  // The batch was written: every placement in it may be offered.
  void Committed();

 private:
  static std::string Key(const std::string& job_id, int attempt, const std::string& node_id);

  mutable Mutex mu_;
  // Keys "job#attempt@node": a gang's ranks are delivered one node at a time.
  std::set<std::string> assigned_ TIDE_GUARDED_BY(mu_);
  std::set<std::string> stops_ TIDE_GUARDED_BY(mu_);
  std::set<std::string> uncommitted_ TIDE_GUARDED_BY(mu_);  // job ids
};

}  // namespace tide::server
