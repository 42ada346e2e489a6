// ServerLink: everything the agent says to the server, as one small
// interface. HttpServerLink (http_server_link.h) speaks the agent protocol
// of docs/api.md over api::Client; testing/fake_server.h keeps a server in
// memory for tests. The agent, its JobRunners and the registration take a
// ServerLink* and never see HTTP.
//
// Errors are the Status the server sent (kNotFound and kConflict for a job
// it no longer wants, kUnauthenticated for a revoked token, ...) or
// kUnavailable when it cannot be reached.
//
// Thread safety: every method may be called from any thread at once, except
// set_node_token, which is called once before the calls that use it.
#pragma once

#include <string>
#include <string_view>

#include "api/types.h"
#include "common/status.h"

namespace tide::agent {

// The server's answer to a registration.
struct Registered {
  std::string node_id;
  std::string node_token;  // "" when the node token that registered stays valid
};

class ServerLink {
 public:
  virtual ~ServerLink() = default;

  // Registers with `token`: a join token, or the node token saved earlier.
  virtual Result<Registered> Register(const std::string& token,
                                      const api::RegisterRequest& req) = 0;

  // The credential of every call below.
  virtual void set_node_token(const std::string& token) = 0;

  virtual Result<api::AgentWork> Heartbeat(const api::Heartbeat& hb) = 0;
  // Long-poll: returns when there is work, or after about `wait_s` seconds.
  virtual Result<api::AgentWork> PollWork(int wait_s) = 0;

  virtual Status PostEvent(const std::string& job_id, const api::JobEvent& event) = 0;
  // Log bytes and metric lines of an attempt from `offset`: idempotent by
  // offset; an offset past what the server holds is kConflict (a gap).
  virtual Status PostLogs(const std::string& job_id, int attempt, int64_t offset,
                          std::string_view data) = 0;
  virtual Status PostMetrics(const std::string& job_id, int attempt, int64_t offset,
                             std::string_view data) = 0;
  virtual Status PutOutput(const std::string& job_id, int attempt, const std::string& path,
                           std::string_view data) = 0;
  // The job's code archive (.tar.gz).
  virtual Result<std::string> GetCode(const std::string& job_id) = 0;
  // Replaces this rank's checkpoint; `sha256` (hex) proves it arrived whole.
  virtual Status PutCheckpoint(const std::string& job_id, int attempt, std::string_view archive,
                               const std::string& sha256) = 0;
  // The newest checkpoint of this node's rank; kNotFound if none.
  virtual Result<std::string> GetCheckpoint(const std::string& job_id, int attempt) = 0;
};

}  // namespace tide::agent
