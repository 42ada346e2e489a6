// HttpServerLink: the ServerLink of a real agent, over api::Client.
//
// An api::Client is one keep-alive connection and is not thread-safe, so the
// link keeps a pool: each call borrows an idle client (or makes one) and
// gives it back when it returns. A long-poll holds one client for its
// duration; the heartbeat and every JobRunner's reporter use others.
//
// Thread-safe (see server_link.h).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/server_link.h"
#include "api/client.h"

namespace tide::agent {

class HttpServerLink final : public ServerLink {
 public:
  // `server` is "http://HOST:PORT" or "https://HOST:PORT", trusted as
  // `trust` says; a malformed one is an error here.
  static Result<std::unique_ptr<HttpServerLink>> Create(const std::string& server,
                                                        const api::TlsTrust& trust = {});

  Result<Registered> Register(const std::string& token, const api::RegisterRequest& req) override;
  void set_node_token(const std::string& token) override;

  // True for an https:// server verified by pins (not by a CA).
  bool pinned() const;
  // Trusts `pins` for every connection made from now on; pooled
  // connections are closed. False when they are the pins already trusted.
  bool SetPins(std::vector<std::string> pins);
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
  HttpServerLink(std::string server, api::TlsTrust trust)
      : server_(std::move(server)), trust_(std::move(trust)) {}

  // Runs `fn` with a client of the pool that carries the node token.
  template <typename Fn>
  auto WithClient(Fn fn) -> decltype(fn(std::declval<api::Client&>()));

  const std::string server_;
  mutable std::mutex mu_;
  api::TlsTrust trust_;          // guarded by mu_
  uint64_t trust_generation_ = 0;  // guarded by mu_: bumped by SetPins
  std::string node_token_;                           // guarded by mu_
  std::vector<std::unique_ptr<api::Client>> idle_;  // guarded by mu_
};

}  // namespace tide::agent
