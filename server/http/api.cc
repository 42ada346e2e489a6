#include "server/http/api.h"

#include "common/tls.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "api/types.h"
#include "common/json_reader.h"
#include "common/tls.h"

namespace tide::server {

using nlohmann::json;

// The one table from Code to HTTP status.
int HttpStatus(const Status& s) {
  switch (s.code()) {
    case Code::kOk: return 200;
    case Code::kInvalidArgument: return 400;
    case Code::kUnauthenticated: return 401;
    case Code::kPermissionDenied: return 403;
    case Code::kNotFound: return 404;
    case Code::kConflict: return 409;
    case Code::kTooLarge: return 413;
    case Code::kInsufficientCredit: return 402;
    case Code::kUnavailable: return 503;
    case Code::kInternal: return 500;
    case Code::kRateLimited: return 429;
  }
  return 500;
}

Response JsonResponse(int status, const json& body) {
  Response r;
  r.status = status;
  r.body = body.dump();
  return r;
}

Response ErrorResponse(const Status& s) {
  Response r = JsonResponse(HttpStatus(s), api::ErrorJson(s));
  if (s.code() == Code::kUnauthenticated) r.headers["WWW-Authenticate"] = "Bearer";
  return r;
}

// A body is read as JSON whatever its Content-Type says: `curl -d '{...}'`
// sends application/x-www-form-urlencoded, and a body that parses is what
// the caller meant. One that does not parse is a 400 that names the type it
// came with when that type was not JSON.
Result<json> ParseBody(const Request& req) {
  auto j = ParseJson(req.body.empty() ? "{}" : req.body);
  if (j.ok()) return j;
  std::string ct = req.Header("content-type");
  std::string message = j.status().message();
  if (!ct.empty() && ct.find("json") == std::string::npos) {
    message = "the body must be JSON (it came as Content-Type " + ct + "): " + message;
  }
  return Status::InvalidArgument(message, "body");
}

Result<int64_t> QueryInt(const Request& req, const std::string& key, int64_t def, int64_t min,
                         int64_t max) {
  std::string v = req.Query(key);
  if (v.empty()) return def;
  int64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9' || n > (1LL << 50)) {
      return Status::InvalidArgument("must be a non-negative integer", key);
    }
    n = n * 10 + (c - '0');
  }
  if (n < min || n > max) {
    return Status::InvalidArgument("must be between " + std::to_string(min) + " and " +
                                       std::to_string(max),
                                   key);
  }
  return n;
}

Result<bool> QueryBool(const Request& req, const std::string& key, bool def) {
  std::string v = req.Query(key);
  if (v.empty()) return def;
  if (v != "true" && v != "false") return Status::InvalidArgument("must be true or false", key);
  return v == "true";
}

static bool EndsWith(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

size_t Api::BodyLimit(const std::string& method, const std::string& path) {
  if (path == "/v1/code") return api::kMaxUploadBody;
  if (path.rfind("/v1/agent/jobs/", 0) == 0) {
    if (EndsWith(path, "/outputs")) return api::kMaxUploadBody;
    if (EndsWith(path, "/checkpoint")) return api::kMaxUploadBody;
    if (EndsWith(path, "/logs") || EndsWith(path, "/metrics")) return api::kMaxLogChunk;
  }
  if (path == "/v1/batches" && method == "POST") return api::kMaxBatchBody;
  return api::kMaxRequestBody;
}

std::optional<Response> Api::Limited(RateLimiter* limiter, const std::string& who,
                                     const std::string& key) const {
  int64_t retry_ms = 0;
  if (limiter == nullptr || limiter->Allow(key, clock_->MonotonicMs(), &retry_ms)) {
    return std::nullopt;
  }
  int64_t retry_s = std::max<int64_t>(1, (retry_ms + 999) / 1000);
  Response r = ErrorResponse(Status::RateLimited(
      "too many requests from " + who + ": retry after " + std::to_string(retry_s) + " s"));
  r.headers["Retry-After"] = std::to_string(retry_s);
  return r;
}

namespace {

// What a user token's scope lets it do. read: look (GET, HEAD), ask for
// an estimate and convert a spec. submit: that, and submit, cancel and upload code for jobs
// and batches, and delete jobs. full: everything the user may. Routes refuse the rest with
// 403 naming the scope.
Status ScopeAllows(const Caller& caller, const std::string& method, const std::string& path,
                   const std::vector<std::string>& seg) {
  if (caller.scope != Scope::kUser || caller.access == Access::kFull) return Status::Ok();
  if (method == "GET" || method == "HEAD") return Status::Ok();
  const std::string& resource = seg[1];
  if (method == "POST" && (resource == "estimate" || resource == "convert")) return Status::Ok();
  if (caller.access == Access::kSubmit) {
    bool submit = method == "POST" && (resource == "jobs" || resource == "batches") &&
                  (seg.size() == 2 || (seg.size() == 4 && seg[3] == "cancel"));
    submit = submit || (method == "DELETE" && resource == "jobs" && seg.size() == 3);
    bool code = method == "POST" && resource == "code" && seg.size() == 2;
    if (submit || code) return Status::Ok();
  }
  return Status::PermissionDenied(std::string("this token's scope is ") + AccessName(caller.access) +
                                  (caller.access == Access::kRead
                                       ? ": it may only look"
                                       : ": it may look, submit and cancel jobs and batches, and delete jobs") +
                                  "; " + method + " " + path + " needs a token of scope full");
}

}  // namespace

Response Api::Handle(const Request& req) {
  Response r = Dispatch(req);
  // Every answer: never sniffed as another type, never framed.
  r.headers["X-Content-Type-Options"] = "nosniff";
  r.headers["X-Frame-Options"] = "DENY";
  r.headers["Referrer-Policy"] = "no-referrer";
  return r;
}

Response Api::Dispatch(const Request& req) {
  Segments seg;
  {
    size_t start = 1;
    const std::string& p = req.path;
    if (p.empty() || p[0] != '/') return ErrorResponse(Status::NotFound("no such route"));
    while (start <= p.size()) {
      size_t end = p.find('/', start);
      if (end == std::string::npos) end = p.size();
      seg.push_back(p.substr(start, end - start));
      start = end + 1;
    }
    if (!seg.empty() && seg.back().empty()) seg.pop_back();
  }
  if (seg.size() == 1 && seg[0] == "healthz") {
    return JsonResponse(200, {{"status", "ok"}});
  }
  if (seg.size() == 1 && seg[0] == "metrics" && req.method == "GET") {
    // Operator totals: the admin token, as a Prometheus bearer token.
    std::string auth = req.Header("authorization");
    auto caller = core_->Authenticate(auth.rfind("Bearer ", 0) == 0 ? auth.substr(7) : "");
    if (!caller.ok()) return ErrorResponse(caller.status());
    if (caller->scope != Scope::kAdmin) {
      return ErrorResponse(Status::PermissionDenied("/metrics needs the admin token"));
    }
    Response r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = core_->Metrics();
    return r;
  }
  if (seg.empty() || seg[0] != "v1" || seg.size() < 2) {
    if (req.method == "GET" || req.method == "HEAD") return Console(req);
    return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
  }
  if (seg.size() == 2 && seg[1] == "session" && req.method == "POST") return Login(req);
  std::string auth = req.Header("authorization");
  std::string token;
  if (auth.rfind("Bearer ", 0) == 0) token = auth.substr(7);
  // A join token as printed carries the server's pins after its secret.
  if (auto join = tls::SplitJoinToken(token, "token"); join.ok()) token = join->secret;
  // Without a bearer token, the console's session cookie.
  bool from_cookie = false;
  if (auth.empty()) {
    token = req.Cookie(SessionCookieName(req.secure));
    from_cookie = !token.empty();
  }
  auto caller = core_->Authenticate(token);
  if (caller.ok() && caller->session != from_cookie) {
    caller = Status::Unauthenticated(from_cookie ? "the session cookie holds no session: log in again"
                                                 : "a session works only as the console's cookie");
  }
  if (caller.ok() && from_cookie) {
    if (Status st = CheckSessionRequest(req, token); !st.ok()) return ErrorResponse(st);
  }
  if (!caller.ok()) {
    // Requests without a valid token count against their address: a
    // guesser is slowed down, and told so, before it learns anything.
    if (auto limited = Limited(address_limits_.get(), "address " + req.remote_addr, req.remote_addr)) {
      return *limited;
    }
    return ErrorResponse(caller.status());
  }
  caller->address = req.remote_addr;  // for the audit log
  // Agents' traffic (logs, outputs, checkpoints) is not limited here: a
  // refused upload would cost a consumer their outputs.
  std::shared_ptr<void> slot;
  if (caller->scope == Scope::kUser || caller->scope == Scope::kAdmin) {
    // A session counts against the token it was made from: logging in
    // again gives no fresh allowance.
    const std::string& limited_id =
        caller->session && !caller->parent_token.empty() ? caller->parent_token : caller->token_id;
    if (auto limited = Limited(token_limits_.get(), "token " + limited_id, limited_id)) {
      return *limited;
    }
    if (token_inflight_ != nullptr) {
      slot = token_inflight_->Acquire(limited_id);
      if (slot == nullptr) {
        Response r = ErrorResponse(Status::RateLimited(
            "token " + limited_id + " has " + std::to_string(token_inflight_->max()) +
            " requests open at once: retry after 1 s, or wait for one to end"));
        r.headers["Retry-After"] = "1";
        return r;
      }
    }
  }
  Response r = seg[1] == "session" && seg.size() == 2 ? Session(req, *caller, token)
                                                      : Route(req, *caller, seg);
  if (slot != nullptr && r.stream) {
    // A streamed answer holds its slot until the last chunk.
    r.stream = [inner = std::move(r.stream), slot](const ChunkWriter& write) { inner(write); };
  }
  return r;
}

Response Api::Route(const Request& req, const Caller& caller, const Segments& seg) {
  const std::string& resource = seg[1];
  if (resource == "agent") {
    return Agent(req, caller, seg);
  }
  if (caller.scope == Scope::kJoin || caller.scope == Scope::kNode) {
    return ErrorResponse(Status::PermissionDenied("agent tokens may only use /v1/agent"));
  }
  if (Status st = ScopeAllows(caller, req.method, req.path, seg); !st.ok()) return ErrorResponse(st);
  if (resource == "tokens") return Tokens(req, caller, seg);
  if (resource == "sessions") return Sessions(req, caller, seg);
  if (resource == "jobs") return Jobs(req, caller, seg);
  if (resource == "events" && seg.size() == 2 && req.method == "GET") return Events(req, caller);
  if (resource == "convert" && seg.size() == 2 && req.method == "POST") return Convert(req);
  if (resource == "batches") return Batches(req, caller, seg);
  if (resource == "code" && seg.size() == 2 && req.method == "POST") return UploadCode(req, caller);
  if (resource == "nodes") return Nodes(req, caller, seg);
  if (resource == "queue") return Queue(req, caller, seg);
  if (resource == "admin") return Admin(req, caller, seg);
  if (resource == "account" || resource == "cards" || resource == "usage" ||
      resource == "estimate" || resource == "prices" || resource == "provider") {
    return Money(req, caller, seg);
  }
  return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
}

}  // namespace tide::server
