// FakeServer: the server side of the agent protocol, in memory, as a
// ServerLink the agent calls directly: no sockets, no HTTP. For agent tests
// of the runner and the agent's logic (testing/fake_agent_server.h puts the
// same fake behind real HTTP where the wire is what is tested).
//
// Implements register (join token or a node token it issued), heartbeat,
// the assignments long-poll (answers within a second), events, logs and
// metric lines (idempotent by offset; a gap is kConflict), outputs, code
// and checkpoints, plus fault injection: the server down (kUnavailable),
// failing event posts, rejected jobs (kNotFound), revoked node tokens
// (kUnauthenticated), lost log bytes.
//
// Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "agent/server_link.h"
#include "api/types.h"

namespace tide::agent::testing {

inline constexpr const char* kJoinToken = "tide_j_test";

class FakeServer final : public ServerLink {
 public:
  FakeServer() = default;
  ~FakeServer() override;

  // --- what the server hands out
  void Assign(const api::Job& job, const api::Gang& gang = {});  // returned by the next poll
  void Cancel(const api::CancelOrder& order);                     // returned by the next heartbeat
  void SetCode(const std::string& job_id, std::string archive);
  void SetCheckpoint(const std::string& job_id, std::string archive);

  // --- faults
  void SetDown(bool down);                               // every call is kUnavailable
  void FailEvents(int n);                                // the next n event posts are kUnavailable
  void RejectJob(const std::string& job_id);             // job calls are kNotFound
  void RevokeNodeTokens();                               // node calls are kUnauthenticated
  void LoseLog(const std::string& job_id, int attempt);  // forget acknowledged log bytes

  // --- what the agent did
  std::vector<api::JobEvent> Events(const std::string& job_id);
  std::string Log(const std::string& job_id, int attempt);
  std::string Metrics(const std::string& job_id, int attempt);
  std::map<std::string, std::string> Outputs(const std::string& job_id, int attempt);
  // The last checkpoint uploaded for the job ("" if none), and its attempt.
  std::string Checkpoint(const std::string& job_id, int* attempt = nullptr);
  api::Heartbeat LastHeartbeat();
  int heartbeats();
  int joins();             // registrations with the join token
  int re_registrations();  // registrations with a node token
  int log_posts();
  bool down();
  // A node token this server issued and has not revoked.
  bool IsNodeToken(const std::string& token);

  // Polls `pred` every 20 ms; false after `timeout_ms`.
  static bool WaitFor(const std::function<bool()>& pred, int timeout_ms = 10'000);

  // --- ServerLink
  Result<Registered> Register(const std::string& token, const api::RegisterRequest& req) override;
  void set_node_token(const std::string& token) override {}
  Result<api::AgentWork> Heartbeat(const api::Heartbeat& hb) override;
  Result<api::AgentWork> PollWork(int wait_s) override;
  Status PostEvent(const std::string& job_id, const api::JobEvent& event) override;
  Status PostLogs(const std::string& job_id, int attempt, int64_t offset,
                  std::string_view data) override;
  Status PostMetrics(const std::string& job_id, int attempt, int64_t offset,
                     std::string_view data) override;
  Status PutOutput(const std::string& job_id, int attempt, const std::string& path,
                   std::string_view data) override;
  Result<std::string> GetCode(const std::string& job_id) override;
  Status PutCheckpoint(const std::string& job_id, int attempt, std::string_view archive,
                       const std::string& sha256) override;
  Result<std::string> GetCheckpoint(const std::string& job_id, int attempt) override;

 private:
  // Ok when a node call may go on; `job_id` ("" for none) must not be rejected.
  // REQUIRES: mu_ held.
  Status CheckNodeCall(const std::string& job_id);

  std::mutex mu_;
  std::condition_variable cv_;
  bool closing_ = false;
  int polls_in_flight_ = 0;
  std::deque<api::Assignment> assignments_;
  std::vector<api::CancelOrder> cancels_;
  std::map<std::string, std::string> code_;
  bool down_ = false;
  int fail_events_ = 0;
  std::set<std::string> rejected_;
  std::set<std::string> node_tokens_;
  bool revoked_ = false;
  std::map<std::string, std::vector<api::JobEvent>> events_;
  std::map<std::string, std::string> logs_;     // "job#attempt"
  std::map<std::string, std::string> metrics_;  // "job#attempt"
  std::map<std::string, std::map<std::string, std::string>> outputs_;
  std::map<std::string, std::pair<int, std::string>> checkpoints_;  // job -> (attempt, archive)
  api::Heartbeat last_heartbeat_;
  int heartbeats_ = 0;
  int joins_ = 0;
  int re_registrations_ = 0;
  int log_posts_ = 0;
};

}  // namespace tide::agent::testing
