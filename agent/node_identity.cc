#include "agent/node_identity.h"

#include <chrono>
#include <thread>

#include "common/log.h"
#include "common/paths.h"

namespace tide::agent {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  size_t i = s.find_first_not_of(" \t");
  return i == std::string::npos ? "" : s.substr(i);
}

// One registration with `token`, retried while the failure is transient.
Result<Registered> RegisterWith(const RegisterOptions& options, const std::string& token,
                                const api::RegisterRequest& req) {
  int64_t backoff_ms = 200;
  for (int failures = 0;; ++failures) {
    Result<Registered> r = options.link->Register(token, req);
    if (r.ok()) return r;
    Code code = r.status().code();
    if (code != Code::kUnavailable && code != Code::kInternal) return r.status();
    if (failures == 0 || failures % 10 == 0) {
      spdlog::warn("register with {}: {} (retrying)", options.server, r.status().ToString());
    }
    for (int64_t slept = 0; slept < backoff_ms; slept += 100) {
      if (options.should_stop()) return Status::Unavailable("stopped while registering");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    backoff_ms = std::min(backoff_ms * 2, options.max_backoff_ms);
  }
}

}  // namespace

std::string NodeTokenPath(const std::string& data_dir) { return data_dir + "/node.token"; }

Result<NodeIdentity> Register(const RegisterOptions& options, const api::RegisterRequest& req) {
  const std::string path = NodeTokenPath(options.data_dir);
  std::string saved;
  if (Result<std::string> r = ReadFile(path); r.ok()) saved = Trim(*r);

  if (!saved.empty()) {
    Result<Registered> r = RegisterWith(options, saved, req);
    if (r.ok()) {
      NodeIdentity id;
      id.node_id = r->node_id;
      id.node_token = r->node_token;
      if (id.node_token.empty()) {
        id.node_token = saved;
      } else if (id.node_token != saved) {
        TIDE_RETURN_IF_ERROR(WriteFileAtomic(path, id.node_token + "\n", 0600));
      }
      spdlog::info("re-registered as node {}", id.node_id);
      return id;
    }
    if (r.status().code() != Code::kUnauthenticated || options.join_token.empty()) {
      if (r.status().code() == Code::kUnauthenticated) {
        return Status::Unauthenticated("the server rejected the node token in " + path +
                                       " (revoked?); start again with --join-token to rejoin");
      }
      return r.status().WithContext("register");
    }
    spdlog::warn("the server rejected the saved node token; joining again with the join token");
  }

  if (options.join_token.empty()) {
    return Status::InvalidArgument(
        "no node token in " + path + ": pass --join-token (from `tide admin join-token`)",
        "join_token");
  }
  Result<Registered> r = RegisterWith(options, options.join_token, req);
  if (!r.ok()) {
    if (r.status().code() == Code::kUnauthenticated) {
      return Status::Unauthenticated("the server rejected the join token: " + r.status().message());
    }
    return r.status().WithContext("register");
  }
  NodeIdentity id;
  id.node_id = r->node_id;
  id.node_token = r->node_token;
  if (id.node_id.empty() || id.node_token.empty()) {
    return Status::Internal("register: the server answered without node_id or node_token");
  }
  TIDE_RETURN_IF_ERROR(WriteFileAtomic(path, id.node_token + "\n", 0600));
  spdlog::info("joined as node {}", id.node_id);
  return id;
}

}  // namespace tide::agent
