// Client: the typed Tide API client used by the CLI, the agent, tests and
// benchmarks. One method per endpoint; errors from the server come back as
// the Status it sent ({"error": {"code", "message", "field"}}).
//
// Not thread-safe: use one Client per thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/http_client.h"
#include "api/telemetry.h"
#include "api/types.h"
#include "common/status.h"

namespace tide::api {

struct JobFilter {
  std::string status;  // one status, or "" for all
  std::string tag;
  int limit = 0;       // 0 = server default
  std::string after;   // page token: the last id of the previous page
};

struct JobPage {
  std::vector<Job> jobs;
  std::string next;  // "" when this was the last page
};

struct OutputFile {
  std::string path;
  int64_t size = 0;
};

struct NewToken {
  std::string id;     // user or join token id
  std::string token;  // the secret, shown once
};

struct NewJoinToken {
  std::string id;     // "jt-…": names the token without revealing it
  std::string token;  // the secret, shown once
  std::string provider_id;     // the agents' owner; "" = the operator
  std::string provider_token;  // the provider's API token, when this call created the account
  std::vector<std::string> pins;  // the server certificate pins the token carries (TLS only)
};

class Client {
 public:
  // `token` may be empty for unauthenticated calls (health). An https://
  // server is trusted as `trust` says; without one, as TrustFromEnvironment().
  static Result<std::unique_ptr<Client>> Create(const std::string& server, std::string token,
                                                const std::optional<TlsTrust>& trust = std::nullopt);
  // TIDE_CA_FILE (a PEM file of CAs) and TIDE_PIN (pins, comma-separated);
  // a malformed pin is an error naming TIDE_PIN.
  static Result<TlsTrust> TrustFromEnvironment();

  // Raw JSON request; 2xx answers are parsed, others become their Status.
  Result<json> Call(const std::string& method, const std::string& target,
                    const std::optional<json>& body = std::nullopt, int timeout_ms = 30'000);
  // The same with extra request headers (Idempotency-Key, ...).
  Result<json> CallWithHeaders(const std::string& method, const std::string& target,
                               const json& body, const std::map<std::string, std::string>& headers,
                               int timeout_ms = 30'000);
  // Same with a raw body (uploads) and a raw answer (downloads).
  Result<std::string> CallRaw(const std::string& method, const std::string& target,
                              std::string_view body, const std::string& content_type,
                              int timeout_ms = 120'000);

  Status Health();

  // --- users ---
  // POST /v1/jobs with ToJson(spec). A spec the server must see as it is
  // (a test of its validation) goes through Call().
  Result<Job> SubmitJob(const JobSpec& spec, const std::string& idempotency_key = "");
  Result<Job> GetJob(const std::string& id);
  Result<JobPage> ListJobs(const JobFilter& filter);
  Result<Job> CancelJob(const std::string& id);
  // Log text of one attempt (0 = current) from byte `offset`; `rank` picks
  // the node of a multi-node job.
  Result<std::string> GetLogs(const std::string& id, int attempt = 0, int64_t offset = 0,
                              int rank = 0);
  // Follows the log of `attempt` (0: the current one, and then each next
  // one with a marker line) until it ends; `on_data` gets text as it arrives.
  Status FollowLogs(const std::string& id, int attempt, int64_t offset,
                    const std::function<bool(std::string_view)>& on_data, int rank = 0);
  // GET /v1/jobs/{id}/telemetry: its GPUs' readings and averages; without
  // `series`, only the newest readings and the averages.
  Result<JobTelemetry> GetJobTelemetry(const std::string& id, bool series = true);
  Result<std::vector<OutputFile>> ListOutputs(const std::string& id);
  Result<std::string> GetOutput(const std::string& id, const std::string& path);
  // Uploads a .tar.gz; returns its code id.
  Result<std::string> UploadCode(const std::string& archive);
  Result<std::vector<Node>> ListNodes();

  // --- admin ---
  Result<NewToken> CreateUser(const std::string& name);
  // Agents joining with it belong to `provider` (a user name or id). With
  // `create_provider`, a provider name that is no user yet becomes one.
  // `expires`: a duration ("24h", "7d") or "never"; "" = the server's default (a day).
  Result<NewJoinToken> CreateJoinToken(const std::string& provider = "",
                                       bool create_provider = false,
                                       const std::string& expires = "");

  // --- agent (token: join token for Register, node token afterwards) ---
  Result<json> Register(const RegisterRequest& req);
  Result<AgentWork> Heartbeat(const api::Heartbeat& hb);
  Result<AgentWork> PollWork(int wait_s);
  Status PostEvent(const std::string& job_id, const JobEvent& event);
  Status PostLogs(const std::string& job_id, int attempt, int64_t offset, std::string_view data);
  Status PutOutput(const std::string& job_id, int attempt, const std::string& path,
                   std::string_view data);
  Result<std::string> GetCode(const std::string& job_id);
  // Metric lines (JSON, one per line) by offset, like PostLogs.
  Status PostMetrics(const std::string& job_id, int attempt, int64_t offset,
                     std::string_view data);
  // Replaces this rank's checkpoint; `sha256` (hex) proves it arrived whole.
  Status PutCheckpoint(const std::string& job_id, int attempt, std::string_view archive,
                       const std::string& sha256);
  // The newest checkpoint of this node's rank; NotFound if none.
  Result<std::string> GetCheckpoint(const std::string& job_id, int attempt);

  void set_token(std::string token) { token_ = std::move(token); }
  const std::string& server() const { return server_; }

 private:
  Client(std::string server, std::string token, std::unique_ptr<HttpClient> http)
      : server_(std::move(server)), token_(std::move(token)), http_(std::move(http)) {}
  std::map<std::string, std::string> Headers(const std::string& content_type = "") const;
  // POST /v1/agent/jobs/{id}/{stream}?attempt&offset: logs and metric lines.
  Status PostStream(const std::string& job_id, const char* stream, int attempt, int64_t offset,
                    std::string_view data, const std::string& content_type);

  std::string server_;
  std::string token_;
  std::unique_ptr<HttpClient> http_;
};

}  // namespace tide::api
