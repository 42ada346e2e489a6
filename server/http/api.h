// Api: the HTTP/JSON API of the server, one file per resource:
//   api.cc     routing, authentication, errors (the one Code -> HTTP table)
//   jobs.cc    /v1/jobs, logs, outputs, /v1/code
//   agent.cc   /v1/agent/...
//   admin.cc   /v1/admin/..., /v1/nodes, /healthz
//   queue.cc   /v1/queue
//   money.cc   /v1/account, cards, usage, estimate, prices, provider earnings
// Every handler validates completely before it asks the core to change
// anything, so a rejected request leaves nothing behind.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/blob_store.h"
#include "server/core.h"
#include "server/http/http_server.h"
#include "server/http/rate_limiter.h"

namespace tide::server {

class Api {
 public:
  Api(Core* core, BlobStore* blobs, Clock* clock) : core_(core), blobs_(blobs), clock_(clock) {}

  Response Handle(const Request& req);
  // The body limit for a route, checked before the body is read.
  static size_t BodyLimit(const std::string& method, const std::string& path);
  // The pins of the server's TLS key(s), carried by the join tokens it
  // makes (common/tls.h). Set before serving; empty for plain HTTP.
  void set_tls_pins(std::vector<std::string> pins) {
    std::lock_guard<std::mutex> lock(tls_mu_);
    tls_pins_ = std::move(pins);
  }
  std::vector<std::string> tls_pins() const {
    std::lock_guard<std::mutex> lock(tls_mu_);
    return tls_pins_;
  }
  // Rate limits (docs/security.md, "Limits"): each token's requests, and
  // each address's requests that carry no valid token. Set before serving.
  void set_rate_limits(RateLimit per_token, RateLimit per_address) {
    token_limits_ = std::make_unique<RateLimiter>(per_token);
    address_limits_ = std::make_unique<RateLimiter>(per_address);
  }
  // At most `max` requests of one user or admin token open at once (a
  // streamed answer counts until it ends); 0: no cap. Set before serving.
  void set_inflight_limit(int max) { token_inflight_ = std::make_unique<InFlightLimiter>(max); }

 private:
  using Segments = std::vector<std::string>;

  Response Dispatch(const Request& req);
  // A request that passed authentication and the limits, to its resource.
  Response Route(const Request& req, const Caller& caller, const Segments& seg);
  // The web console (console.cc): its files and pages, for GET and HEAD
  // outside /v1.
  Response Console(const Request& req);
  // session.cc: POST /v1/session (a token in, a cookie out), GET /login?code=
  // (a one-time link), and GET or DELETE /v1/session for the session of
  // `secret`.
  Response Login(const Request& req);
  Response LoginLink(const Request& req);
  Response Session(const Request& req, const Caller& caller, const std::string& secret);
  Response Sessions(const Request& req, const Caller& caller, const Segments& seg);
  Response Jobs(const Request& req, const Caller& caller, const Segments& seg);
  Response Tokens(const Request& req, const Caller& caller, const Segments& seg);
  Response SubmitJob(const Request& req, const Caller& caller);
  Response ListJobs(const Request& req, const Caller& caller);
  Response Events(const Request& req, const Caller& caller);  // events.cc
  Response Convert(const Request& req);                        // convert.cc
  Response Logs(const Request& req, const Caller& caller, const std::string& id);
  Response Metrics(const Request& req, const Caller& caller, const std::string& id);
  Response Outputs(const Request& req, const Caller& caller, const std::string& id,
                   const std::string& path);
  Response OutputsTar(const Caller& caller, const std::string& id);
  Response TelemetryStream(const Caller& caller, const api::JobTelemetry& first);
  Response UploadCode(const Request& req, const Caller& caller);
  Response Agent(const Request& req, const Caller& caller, const Segments& seg);
  Response Batches(const Request& req, const Caller& caller, const Segments& seg);
  nlohmann::json BatchJson(const BatchInfo& b) const;
  Response Admin(const Request& req, const Caller& caller, const Segments& seg);
  Response Nodes(const Request& req, const Caller& caller, const Segments& seg);
  Response Queue(const Request& req, const Caller& caller, const Segments& seg);
  Response Money(const Request& req, const Caller& caller, const Segments& seg);
  Response AdminMoney(const Request& req, const Caller& caller, const Segments& seg);
  // A 429 with Retry-After when `limiter` refuses `key` now; nullopt when
  // it allows it. `who` names the caller in the message.
  std::optional<Response> Limited(RateLimiter* limiter, const std::string& who,
                                  const std::string& key) const;
  // A job as the API shows it: the record plus its cost and escrow.
  nlohmann::json JobJson(const api::Job& job) const;

  Core* core_;
  BlobStore* blobs_;
  Clock* clock_;
  std::unique_ptr<RateLimiter> token_limits_;    // null: none
  std::unique_ptr<RateLimiter> address_limits_;  // null: none
  std::unique_ptr<InFlightLimiter> token_inflight_;  // null: none
  mutable std::mutex tls_mu_;
  std::vector<std::string> tls_pins_;  // guarded by tls_mu_
};

// Helpers shared by the resource files.
int HttpStatus(const Status& s);
Response JsonResponse(int status, const nlohmann::json& body);
Response ErrorResponse(const Status& s);
// Parses the JSON body; the error names "body".
Result<nlohmann::json> ParseBody(const Request& req);
// An amount as a JSON number of credits ("12.5").
nlohmann::json Credits(ledger::Micros amount);
// A token as the API shows it: never the secret.
nlohmann::json TokenJson(const TokenInfo& t);
// "expires": a duration from `now` ("30d", "12h") or "never" (0); absent
// gives `def_ms` from now (0: never). The error names `field`.
Result<int64_t> ExpiryFromJson(const std::optional<std::string>& text, int64_t now_ms,
                               int64_t def_ms, const std::string& field);
// The console's session cookie: "__Host-tide_session" over TLS, else
// "tide_session".
std::string SessionCookieName(bool secure);
// The CSRF token of a session: what its changes must carry in X-Tide-CSRF.
std::string CsrfOf(const std::string& session_secret);
// What a request made with a session cookie must bring: not from another
// site, and for a change the session's CSRF token.
Status CheckSessionRequest(const Request& req, const std::string& session_secret);
// Reads an integer query parameter; absent gives `def`.
Result<int64_t> QueryInt(const Request& req, const std::string& key, int64_t def, int64_t min,
                         int64_t max);
// Reads a boolean query parameter (true or false); absent gives `def`.
Result<bool> QueryBool(const Request& req, const std::string& key, bool def);

}  // namespace tide::server
