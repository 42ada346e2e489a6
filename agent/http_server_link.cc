#include "agent/http_server_link.h"

namespace tide::agent {

Result<std::unique_ptr<HttpServerLink>> HttpServerLink::Create(const std::string& server,
                                                              const api::TlsTrust& trust) {
  auto probe = api::Client::Create(server, "", trust);
  if (!probe.ok()) return probe.status();
  std::unique_ptr<HttpServerLink> link(new HttpServerLink(server, trust));
  link->idle_.push_back(std::move(*probe));
  return link;
}

template <typename Fn>
auto HttpServerLink::WithClient(Fn fn) -> decltype(fn(std::declval<api::Client&>())) {
  std::unique_ptr<api::Client> client;
  std::string token;
  api::TlsTrust trust;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    token = node_token_;
    trust = trust_;
    generation = trust_generation_;
    if (!idle_.empty()) {
      client = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!client) {
    auto made = api::Client::Create(server_, token, trust);
    if (!made.ok()) return made.status();
    client = std::move(*made);
  }
  client->set_token(token);
  auto result = fn(*client);
  std::lock_guard<std::mutex> lock(mu_);
  // A client made under pins since replaced is dropped with its connection.
  if (generation == trust_generation_) idle_.push_back(std::move(client));
  return result;
}

bool HttpServerLink::pinned() const {
  std::lock_guard<std::mutex> lock(mu_);
  return server_.rfind("https://", 0) == 0 && !trust_.pins.empty();
}

bool HttpServerLink::SetPins(std::vector<std::string> pins) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pins == trust_.pins) return false;
  trust_.pins = std::move(pins);
  ++trust_generation_;
  idle_.clear();
  return true;
}

Result<Registered> HttpServerLink::Register(const std::string& token,
                                            const api::RegisterRequest& req) {
  api::TlsTrust trust;
  {
    std::lock_guard<std::mutex> lock(mu_);
    trust = trust_;
  }
  auto client = api::Client::Create(server_, token, trust);
  if (!client.ok()) return client.status();
  Result<api::json> answer = (*client)->Register(req);
  if (!answer.ok()) return answer.status();
  Registered r;
  r.node_id = answer->value("node_id", "");
  r.node_token = answer->value("node_token", "");
  return r;
}

void HttpServerLink::set_node_token(const std::string& token) {
  std::lock_guard<std::mutex> lock(mu_);
  node_token_ = token;
}

Result<api::AgentWork> HttpServerLink::Heartbeat(const api::Heartbeat& hb) {
  return WithClient([&](api::Client& c) { return c.Heartbeat(hb); });
}

Result<api::AgentWork> HttpServerLink::PollWork(int wait_s) {
  return WithClient([&](api::Client& c) { return c.PollWork(wait_s); });
}

Status HttpServerLink::PostEvent(const std::string& job_id, const api::JobEvent& event) {
  return WithClient([&](api::Client& c) { return c.PostEvent(job_id, event); });
}

Status HttpServerLink::PostLogs(const std::string& job_id, int attempt, int64_t offset,
                                std::string_view data) {
  return WithClient([&](api::Client& c) { return c.PostLogs(job_id, attempt, offset, data); });
}

Status HttpServerLink::PostMetrics(const std::string& job_id, int attempt, int64_t offset,
                                   std::string_view data) {
  return WithClient([&](api::Client& c) { return c.PostMetrics(job_id, attempt, offset, data); });
}

Status HttpServerLink::PutOutput(const std::string& job_id, int attempt, const std::string& path,
                                 std::string_view data) {
  return WithClient([&](api::Client& c) { return c.PutOutput(job_id, attempt, path, data); });
}

Result<std::string> HttpServerLink::GetCode(const std::string& job_id) {
  return WithClient([&](api::Client& c) { return c.GetCode(job_id); });
}

Status HttpServerLink::PutCheckpoint(const std::string& job_id, int attempt,
                                     std::string_view archive, const std::string& sha256) {
  return WithClient(
      [&](api::Client& c) { return c.PutCheckpoint(job_id, attempt, archive, sha256); });
}

Result<std::string> HttpServerLink::GetCheckpoint(const std::string& job_id, int attempt) {
  return WithClient([&](api::Client& c) { return c.GetCheckpoint(job_id, attempt); });
}

}  // namespace tide::agent
