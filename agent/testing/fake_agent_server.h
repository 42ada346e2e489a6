// FakeAgentServer: a FakeServer (fake_server.h) behind real HTTP on
// 127.0.0.1, for the agent tests where the wire is what is tested: the
// agent's requests, the HTTP statuses and error bodies of the agent
// protocol, and how api::Client maps them back. It only translates; what
// the server does and remembers is the FakeServer's.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/testing/fake_server.h"

namespace tide::agent::testing {

class FakeAgentServer {
 public:
  // `backend` is not owned and outlives the server.
  explicit FakeAgentServer(FakeServer* backend);
  ~FakeAgentServer();

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

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

 private:

  void AcceptLoop();
  void Serve(int fd);
  Response Handle(const Request& req);
  Response HandleJob(const Request& req, const std::string& job_id, const std::string& what);

  FakeServer* backend_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  std::atomic<bool> closing_{false};

  std::mutex mu_;
  std::vector<std::thread> conn_threads_;
  std::set<int> conn_fds_;
};

}  // namespace tide::agent::testing
