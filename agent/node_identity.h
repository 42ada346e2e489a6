// Node identity: the node token that proves to the server who this agent is.
//
// The first start registers with a join token and saves the node token in
// DATA_DIR/node.token (mode 0600). Later starts re-register with the saved
// token, which returns the same node id and refreshes the node's GPUs. If
// the server rejects the saved token (401: revoked, or a server that forgot
// us) and a join token was given, the node joins again as a new node.
#pragma once

#include <functional>
#include <string>

#include "agent/server_link.h"
#include "api/types.h"
#include "common/status.h"

namespace tide::agent {

struct NodeIdentity {
  std::string node_id;
  std::string node_token;
};

struct RegisterOptions {
  ServerLink* link = nullptr;  // not owned
  std::string server;          // where the link goes, for messages
  std::string data_dir;
  std::string join_token;  // may be empty when a node token is saved
  // Polled between retries while the server is unreachable; true aborts
  // with kUnavailable.
  std::function<bool()> should_stop = [] { return false; };
  int64_t max_backoff_ms = 5'000;
};

// Registers (retrying while the server is unreachable or failing) and
// returns the node's identity. Errors: kInvalidArgument when there is no
// saved token and no join token, kUnauthenticated when the server refuses
// both, kUnavailable when stopped while waiting for the server.
Result<NodeIdentity> Register(const RegisterOptions& options, const api::RegisterRequest& req);

std::string NodeTokenPath(const std::string& data_dir);

}  // namespace tide::agent
