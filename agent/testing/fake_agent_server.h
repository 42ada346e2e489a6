// FakeAgentServer: the server side of the agent protocol, in memory, over
// real HTTP on 127.0.0.1, for the agent's tests. Not linked into tide_agent.
//
// Implements register, heartbeat, the assignments long-poll, events, logs
// (idempotent by offset; a gap is a 409), outputs and code, plus fault
// injection (server down, failing events, rejected jobs, revoked token).
//
// Thread-safe.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "api/types.h"

namespace tide::agent::testing {

inline constexpr const char* kJoinToken = "tide_j_test";

class FakeAgentServer {
 public:
  FakeAgentServer();
  ~FakeAgentServer();

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // --- what the server hands out
  void Assign(const api::Job& job);            // returned by the next poll
  void Cancel(const api::CancelOrder& order);  // returned by the next heartbeat
  void SetCode(const std::string& job_id, std::string archive);

  // --- faults
  void SetDown(bool down);                               // every agent call answers 503
  void FailEvents(int n);                                // the next n event posts answer 503
  void RejectJob(const std::string& job_id);             // job calls answer 404
  void RevokeNodeTokens();                               // node tokens answer 401
  void LoseLog(const std::string& job_id, int attempt);  // forget acknowledged log bytes

  // --- what the agent did
  std::vector<api::JobEvent> Events(const std::string& job_id);
  std::string Log(const std::string& job_id, int attempt);
  std::map<std::string, std::string> Outputs(const std::string& job_id, int attempt);
  api::Heartbeat LastHeartbeat();
  int heartbeats();
  int joins();             // registrations with the join token
  int re_registrations();  // registrations with a node token
  int log_posts();

  // Polls `pred` every 20 ms; false after `timeout_ms`.
  static bool WaitFor(const std::function<bool()>& pred, int timeout_ms = 10'000);

 private:
  struct Request {
    std::string method;
    std::string path;
    std::map<std::string, std::string> query;
    std::map<std::string, std::string> headers;  // lowercase names
    std::string body;
  };
  struct Response {
    int status = 200;
    std::string body = "{}";
  };

  void AcceptLoop();
  void Serve(int fd);
  Response Handle(const Request& req);
  Response HandleJob(const Request& req, const std::string& job_id, const std::string& what);

  int listen_fd_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  std::atomic<bool> closing_{false};

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> conn_threads_;
  std::set<int> conn_fds_;
  std::deque<api::Job> assignments_;
  std::vector<api::CancelOrder> cancels_;
  std::map<std::string, std::string> code_;
  bool down_ = false;
  int fail_events_ = 0;
  std::set<std::string> rejected_;
  std::set<std::string> node_tokens_;
  bool revoked_ = false;
  std::map<std::string, std::vector<api::JobEvent>> events_;
  std::map<std::string, std::string> logs_;  // "job#attempt"
  std::map<std::string, std::map<std::string, std::string>> outputs_;
  api::Heartbeat last_heartbeat_;
  int heartbeats_ = 0;
  int joins_ = 0;
  int re_registrations_ = 0;
  int log_posts_ = 0;
};

}  // namespace tide::agent::testing
