#include "agent/testing/fake_server.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "common/token.h"

namespace tide::agent::testing {
namespace {

std::string Key(const std::string& job_id, int attempt) {
  return job_id + "#" + std::to_string(attempt);
}

// Appends what of [offset, offset + data) `stream` does not hold yet.
Status AppendAt(std::string* stream, int64_t offset, std::string_view data) {
  if (offset < 0 || static_cast<size_t>(offset) > stream->size()) {
    return Status::Conflict("offset beyond end");
  }
  const size_t at = static_cast<size_t>(offset);
  if (at + data.size() > stream->size()) stream->append(data.substr(stream->size() - at));
  return Status::Ok();
}

}  // namespace

FakeServer::~FakeServer() {
  // An agent's detached poll thread may still be waiting here.
  std::unique_lock<std::mutex> lock(mu_);
  closing_ = true;
  cv_.notify_all();
  cv_.wait(lock, [this] { return polls_in_flight_ == 0; });
}

Status FakeServer::CheckNodeCall(const std::string& job_id) {
  if (down_) return Status::Unavailable("server down");
  if (revoked_) return Status::Unauthenticated("bad node token");
  if (!job_id.empty() && rejected_.count(job_id) != 0) return Status::NotFound("no such job");
  return Status::Ok();
}

Result<Registered> FakeServer::Register(const std::string& token, const api::RegisterRequest&) {
  std::lock_guard<std::mutex> lock(mu_);
  if (down_) return Status::Unavailable("server down");
  if (token == kJoinToken) {
    ++joins_;
    std::string node_token = "tide_n_test" + std::to_string(joins_);
    node_tokens_.insert(node_token);
    return Registered{"n-" + std::to_string(joins_), node_token};
  }
  if (node_tokens_.count(token) != 0 && !revoked_) {
    ++re_registrations_;
    return Registered{"n-" + token.substr(std::strlen("tide_n_test")), ""};
  }
  return Status::Unauthenticated("bad token");
}

Result<api::AgentWork> FakeServer::Heartbeat(const api::Heartbeat& hb) {
  std::lock_guard<std::mutex> lock(mu_);
  TIDE_RETURN_IF_ERROR(CheckNodeCall(""));
  last_heartbeat_ = hb;
  ++heartbeats_;
  api::AgentWork work;
  work.cancels.swap(cancels_);
  return work;
}

Result<api::AgentWork> FakeServer::PollWork(int wait_s) {
  std::unique_lock<std::mutex> lock(mu_);
  TIDE_RETURN_IF_ERROR(CheckNodeCall(""));
  // Answer within a second at most, so tests and shutdown stay quick.
  ++polls_in_flight_;
  cv_.wait_for(lock, std::chrono::seconds(std::min(wait_s, 1)),
               [this] { return !assignments_.empty() || closing_; });
  --polls_in_flight_;
  cv_.notify_all();
  api::AgentWork work;
  while (!assignments_.empty()) {
    work.assignments.push_back(assignments_.front());
    assignments_.pop_front();
  }
  return work;
}

Status FakeServer::PostEvent(const std::string& job_id, const api::JobEvent& event) {
  std::lock_guard<std::mutex> lock(mu_);
  TIDE_RETURN_IF_ERROR(CheckNodeCall(job_id));
  if (fail_events_ > 0) {
    --fail_events_;
    return Status::Unavailable("restarting");
  }
  events_[job_id].push_back(event);
  return Status::Ok();
}

Status FakeServer::PostLogs(const std::string& job_id, int attempt, int64_t offset,
                            std::string_view data) {
  std::lock_guard<std::mutex> lock(mu_);
  TIDE_RETURN_IF_ERROR(CheckNodeCall(job_id));
  ++log_posts_;
  return AppendAt(&logs_[Key(job_id, attempt)], offset, data);
}

Status FakeServer::PostMetrics(const std::string& job_id, int attempt, int64_t offset,
                               std::string_view data) {
  std::lock_guard<std::mutex> lock(mu_);
  TIDE_RETURN_IF_ERROR(CheckNodeCall(job_id));
  return AppendAt(&metrics_[Key(job_id, attempt)], offset, data);
}

Status FakeServer::PutOutput(const std::string& job_id, int attempt, const std::string& path,
                             std::string_view data) {
  std::lock_guard<std::mutex> lock(mu_);
  TIDE_RETURN_IF_ERROR(CheckNodeCall(job_id));
  outputs_[Key(job_id, attempt)][path] = std::string(data);
  return Status::Ok();
}

Result<std::string> FakeServer::GetCode(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  TIDE_RETURN_IF_ERROR(CheckNodeCall(job_id));
  auto it = code_.find(job_id);
  if (it == code_.end()) return Status::NotFound("no code");
  return it->second;
}

Status FakeServer::PutCheckpoint(const std::string& job_id, int attempt, std::string_view archive,
                                 const std::string& sha256) {
  std::lock_guard<std::mutex> lock(mu_);
  TIDE_RETURN_IF_ERROR(CheckNodeCall(job_id));
  if (Sha256Hex(archive) != sha256) return Status::InvalidArgument("checkpoint digest mismatch");
  checkpoints_[job_id] = {attempt, std::string(archive)};
  return Status::Ok();
}

Result<std::string> FakeServer::GetCheckpoint(const std::string& job_id, int) {
  std::lock_guard<std::mutex> lock(mu_);
  TIDE_RETURN_IF_ERROR(CheckNodeCall(job_id));
  auto it = checkpoints_.find(job_id);
  if (it == checkpoints_.end()) return Status::NotFound("no checkpoint for this rank");
  return it->second.second;
}

void FakeServer::Assign(const api::Job& job, const api::Gang& gang) {
  std::lock_guard<std::mutex> lock(mu_);
  assignments_.push_back({job, gang});
  cv_.notify_all();
}

void FakeServer::Cancel(const api::CancelOrder& order) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(order);
}

void FakeServer::SetCode(const std::string& job_id, std::string archive) {
  std::lock_guard<std::mutex> lock(mu_);
  code_[job_id] = std::move(archive);
}

void FakeServer::SetCheckpoint(const std::string& job_id, std::string archive) {
  std::lock_guard<std::mutex> lock(mu_);
  checkpoints_[job_id] = {0, std::move(archive)};
}

void FakeServer::SetDown(bool down) {
  std::lock_guard<std::mutex> lock(mu_);
  down_ = down;
}

void FakeServer::FailEvents(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_events_ = n;
}

void FakeServer::RejectJob(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  rejected_.insert(job_id);
}

void FakeServer::LoseLog(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  logs_[Key(job_id, attempt)].clear();
}

void FakeServer::RevokeNodeTokens() {
  std::lock_guard<std::mutex> lock(mu_);
  revoked_ = true;
}

std::vector<api::JobEvent> FakeServer::Events(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return events_[job_id];
}

std::string FakeServer::Log(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  return logs_[Key(job_id, attempt)];
}

std::string FakeServer::Metrics(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_[Key(job_id, attempt)];
}

std::map<std::string, std::string> FakeServer::Outputs(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  return outputs_[Key(job_id, attempt)];
}

std::string FakeServer::Checkpoint(const std::string& job_id, int* attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = checkpoints_.find(job_id);
  if (attempt != nullptr) *attempt = it == checkpoints_.end() ? 0 : it->second.first;
  return it == checkpoints_.end() ? "" : it->second.second;
}

api::Heartbeat FakeServer::LastHeartbeat() {
  std::lock_guard<std::mutex> lock(mu_);
  return last_heartbeat_;
}

int FakeServer::heartbeats() {
  std::lock_guard<std::mutex> lock(mu_);
  return heartbeats_;
}

int FakeServer::joins() {
  std::lock_guard<std::mutex> lock(mu_);
  return joins_;
}

int FakeServer::re_registrations() {
  std::lock_guard<std::mutex> lock(mu_);
  return re_registrations_;
}

int FakeServer::log_posts() {
  std::lock_guard<std::mutex> lock(mu_);
  return log_posts_;
}

bool FakeServer::down() {
  std::lock_guard<std::mutex> lock(mu_);
  return down_;
}

bool FakeServer::IsNodeToken(const std::string& token) {
  std::lock_guard<std::mutex> lock(mu_);
  return node_tokens_.count(token) != 0 && !revoked_;
}

bool FakeServer::WaitFor(const std::function<bool()>& pred, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

}  // namespace tide::agent::testing
