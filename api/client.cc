#include "api/client.h"

#include <cstdlib>

#include "common/tls.h"

namespace tide::api {

Result<TlsTrust> Client::TrustFromEnvironment() {
  TlsTrust trust;
  if (const char* ca = std::getenv("TIDE_CA_FILE")) trust.ca_file = ca;
  if (const char* pins = std::getenv("TIDE_PIN")) {
    auto parsed = tls::ParsePins(pins, "TIDE_PIN");
    if (!parsed.ok()) return parsed.status();
    trust.pins = std::move(*parsed);
  }
  return trust;
}

Result<std::unique_ptr<Client>> Client::Create(const std::string& server, std::string token,
                                               const std::optional<TlsTrust>& trust) {
  TlsTrust chosen;
  if (trust) {
    chosen = *trust;
  } else {
    auto env = TrustFromEnvironment();
    if (!env.ok()) return env.status();
    chosen = std::move(*env);
  }
  auto http = HttpClient::Create(server, chosen);
  if (!http.ok()) return http.status();
  return std::unique_ptr<Client>(new Client(server, std::move(token), std::move(http).value()));
}

std::map<std::string, std::string> Client::Headers(const std::string& content_type) const {
  std::map<std::string, std::string> h;
  if (!token_.empty()) h["Authorization"] = "Bearer " + token_;
  if (!content_type.empty()) h["Content-Type"] = content_type;
  return h;
}

Result<json> Client::Call(const std::string& method, const std::string& target,
                          const std::optional<json>& body, int timeout_ms) {
  std::string payload = body ? body->dump() : "";
  auto res = http_->Do(method, target, payload, Headers(body ? "application/json" : ""), timeout_ms);
  if (!res.ok()) return res.status();
  if (res->status / 100 != 2) return StatusFromErrorJson(res->status, res->body);
  if (res->body.empty()) return json::object();
  json j = json::parse(res->body, nullptr, false);
  if (j.is_discarded()) return Status::Internal("server sent malformed JSON for " + target);
  return j;
}

Result<json> Client::CallWithHeaders(const std::string& method, const std::string& target,
                                     const json& body,
                                     const std::map<std::string, std::string>& headers,
                                     int timeout_ms) {
  auto h = Headers("application/json");
  for (const auto& [k, v] : headers) h[k] = v;
  auto res = http_->Do(method, target, body.dump(), h, timeout_ms);
  if (!res.ok()) return res.status();
  if (res->status / 100 != 2) return StatusFromErrorJson(res->status, res->body);
  if (res->body.empty()) return json::object();
  json j = json::parse(res->body, nullptr, false);
  if (j.is_discarded()) return Status::Internal("server sent malformed JSON for " + target);
  return j;
}

Result<std::string> Client::CallRaw(const std::string& method, const std::string& target,
                                    std::string_view body, const std::string& content_type,
                                    int timeout_ms) {
  auto res = http_->Do(method, target, body, Headers(content_type), timeout_ms);
  if (!res.ok()) return res.status();
  if (res->status / 100 != 2) return StatusFromErrorJson(res->status, res->body);
  return std::move(res->body);
}

Status Client::Health() {
  auto r = Call("GET", "/healthz", std::nullopt, 5'000);
  return r.ok() ? Status::Ok() : r.status();
}

Result<Job> Client::SubmitJob(const JobSpec& spec, const std::string& idempotency_key) {
  auto h = Headers("application/json");
  if (!idempotency_key.empty()) h["Idempotency-Key"] = idempotency_key;
  auto res = http_->Do("POST", "/v1/jobs", ToJson(spec).dump(), h);
  if (!res.ok()) return res.status();
  if (res->status / 100 != 2) return StatusFromErrorJson(res->status, res->body);
  json j = json::parse(res->body, nullptr, false);
  return JobFromJson(j);
}

Result<Job> Client::GetJob(const std::string& id) {
  auto j = Call("GET", "/v1/jobs/" + UrlEncode(id));
  if (!j.ok()) return j.status();
  return JobFromJson(*j);
}

Result<JobTelemetry> Client::GetJobTelemetry(const std::string& id, bool series) {
  auto j = Call("GET", "/v1/jobs/" + UrlEncode(id) + "/telemetry" + (series ? "" : "?series=false"));
  if (!j.ok()) return j.status();
  return JobTelemetryFromJson(*j);
}

Result<JobPage> Client::ListJobs(const JobFilter& f) {
  std::string q;
  auto add = [&](const std::string& k, const std::string& v) {
    if (v.empty()) return;
    q += (q.empty() ? "?" : "&") + k + "=" + UrlEncode(v);
  };
  add("status", f.status);
  add("tag", f.tag);
  if (f.limit > 0) add("limit", std::to_string(f.limit));
  add("after", f.after);
  auto j = Call("GET", "/v1/jobs" + q);
  if (!j.ok()) return j.status();
  JobPage page;
  for (auto& item : (*j)["jobs"]) {
    auto job = JobFromJson(item);
    if (!job.ok()) return job.status();
    page.jobs.push_back(std::move(job).value());
  }
  page.next = j->value("next", "");
  return page;
}

Result<Job> Client::CancelJob(const std::string& id) {
  auto j = Call("POST", "/v1/jobs/" + UrlEncode(id) + "/cancel", json::object());
  if (!j.ok()) return j.status();
  return JobFromJson(*j);
}

Result<std::string> Client::GetLogs(const std::string& id, int attempt, int64_t offset, int rank) {
  std::string target = "/v1/jobs/" + UrlEncode(id) + "/logs?offset=" + std::to_string(offset);
  if (attempt > 0) target += "&attempt=" + std::to_string(attempt);
  if (rank > 0) target += "&rank=" + std::to_string(rank);
  return CallRaw("GET", target, "", "");
}

Status Client::FollowLogs(const std::string& id, int attempt, int64_t offset,
                          const std::function<bool(std::string_view)>& on_data, int rank) {
  std::string target =
      "/v1/jobs/" + UrlEncode(id) + "/logs?follow=true&offset=" + std::to_string(offset);
  if (attempt > 0) target += "&attempt=" + std::to_string(attempt);
  if (rank > 0) target += "&rank=" + std::to_string(rank);
  return http_->Stream(target, Headers(), on_data, 120'000);
}

Result<std::vector<OutputFile>> Client::ListOutputs(const std::string& id) {
  auto j = Call("GET", "/v1/jobs/" + UrlEncode(id) + "/outputs");
  if (!j.ok()) return j.status();
  std::vector<OutputFile> out;
  for (auto& f : (*j)["files"]) out.push_back({f.value("path", ""), f.value("size", int64_t{0})});
  return out;
}

Result<std::string> Client::GetOutput(const std::string& id, const std::string& path) {
  std::string target = "/v1/jobs/" + UrlEncode(id) + "/outputs/";
  // Keep '/' between segments; encode each segment.
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    target += UrlEncode(path.substr(start, end - start));
    if (end < path.size()) target += "/";
    start = end + 1;
  }
  return CallRaw("GET", target, "", "");
}

Result<std::string> Client::UploadCode(const std::string& archive) {
  auto body = CallRaw("POST", "/v1/code", archive, "application/gzip", 600'000);
  if (!body.ok()) return body.status();
  json j = json::parse(*body, nullptr, false);
  if (!j.is_object() || !j.contains("id")) return Status::Internal("bad answer to code upload");
  return j["id"].get<std::string>();
}

Result<std::vector<Node>> Client::ListNodes() {
  auto j = Call("GET", "/v1/nodes");
  if (!j.ok()) return j.status();
  std::vector<Node> out;
  for (auto& item : (*j)["nodes"]) {
    auto n = NodeFromJson(item);
    if (!n.ok()) return n.status();
    out.push_back(std::move(n).value());
  }
  return out;
}

Result<NewToken> Client::CreateUser(const std::string& name) {
  auto j = Call("POST", "/v1/admin/users", json{{"name", name}});
  if (!j.ok()) return j.status();
  return NewToken{j->value("id", ""), j->value("token", "")};
}

Result<NewJoinToken> Client::CreateJoinToken(const std::string& provider, bool create_provider,
                                             const std::string& expires) {
  json body = json::object();
  if (!expires.empty()) body["expires"] = expires;
  if (!provider.empty()) body["provider"] = provider;
  if (create_provider) body["create_provider"] = true;
  auto j = Call("POST", "/v1/admin/join-tokens", body);
  if (!j.ok()) return j.status();
  NewJoinToken token{j->value("id", ""), j->value("token", ""), j->value("provider_id", ""),
                     j->value("provider_token", ""), {}};
  if (auto pins = j->find("pins"); pins != j->end() && pins->is_array()) {
    for (const auto& pin : *pins) {
      if (pin.is_string()) token.pins.push_back(pin.get<std::string>());
    }
  }
  return token;
}

Result<json> Client::Register(const RegisterRequest& req) {
  return Call("POST", "/v1/agent/register", ToJson(req));
}

Result<AgentWork> Client::Heartbeat(const api::Heartbeat& hb) {
  auto j = Call("POST", "/v1/agent/heartbeat", ToJson(hb), 10'000);
  if (!j.ok()) return j.status();
  return AgentWorkFromJson(*j);
}

Result<AgentWork> Client::PollWork(int wait_s) {
  auto j = Call("GET", "/v1/agent/assignments?wait=" + std::to_string(wait_s), std::nullopt,
                (wait_s + 10) * 1000);
  if (!j.ok()) return j.status();
  return AgentWorkFromJson(*j);
}

Status Client::PostEvent(const std::string& job_id, const JobEvent& event) {
  auto j = Call("POST", "/v1/agent/jobs/" + UrlEncode(job_id) + "/events", ToJson(event));
  return j.ok() ? Status::Ok() : j.status();
}

Status Client::PostStream(const std::string& job_id, const char* stream, int attempt,
                          int64_t offset, std::string_view data, const std::string& content_type) {
  auto r = CallRaw("POST",
                   "/v1/agent/jobs/" + UrlEncode(job_id) + "/" + stream + "?attempt=" +
                       std::to_string(attempt) + "&offset=" + std::to_string(offset),
                   data, content_type, 30'000);
  return r.ok() ? Status::Ok() : r.status();
}

Status Client::PostLogs(const std::string& job_id, int attempt, int64_t offset,
                        std::string_view data) {
  return PostStream(job_id, "logs", attempt, offset, data, "application/octet-stream");
}

Status Client::PutOutput(const std::string& job_id, int attempt, const std::string& path,
                         std::string_view data) {
  auto r = CallRaw("PUT",
                   "/v1/agent/jobs/" + UrlEncode(job_id) + "/outputs?attempt=" +
                       std::to_string(attempt) + "&path=" + UrlEncode(path),
                   data, "application/octet-stream", 600'000);
  return r.ok() ? Status::Ok() : r.status();
}

Result<std::string> Client::GetCode(const std::string& job_id) {
  return CallRaw("GET", "/v1/agent/jobs/" + UrlEncode(job_id) + "/code", "", "", 600'000);
}

Status Client::PostMetrics(const std::string& job_id, int attempt, int64_t offset,
                           std::string_view data) {
  return PostStream(job_id, "metrics", attempt, offset, data, "application/x-ndjson");
}

Status Client::PutCheckpoint(const std::string& job_id, int attempt, std::string_view archive,
                             const std::string& sha256) {
  auto h = Headers("application/gzip");
  h["X-Tide-Sha256"] = sha256;
  auto res = http_->Do("PUT",
                       "/v1/agent/jobs/" + UrlEncode(job_id) +
                           "/checkpoint?attempt=" + std::to_string(attempt),
                       archive, h, 600'000);
  if (!res.ok()) return res.status();
  if (res->status / 100 != 2) return StatusFromErrorJson(res->status, res->body);
  return Status::Ok();
}

Result<std::string> Client::GetCheckpoint(const std::string& job_id, int attempt) {
  return CallRaw("GET",
                 "/v1/agent/jobs/" + UrlEncode(job_id) + "/checkpoint?attempt=" +
                     std::to_string(attempt),
                 "", "", 600'000);
}

}  // namespace tide::api
