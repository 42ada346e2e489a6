// /v1/tokens: a user's own tokens — create (the secret shown once), list
// (never the secret), revoke, rotate with a grace period.
#include "common/duration.h"
#include "common/json_reader.h"
#include "server/http/api.h"

namespace tide::server {

using nlohmann::json;

json TokenJson(const TokenInfo& t) {
  json j = {{"id", t.id},
            {"name", t.name},
            {"created_at", t.created_at},
            {"expires_at", t.expires_at},
            {"last_used_at", t.last_used_at}};
  if (!t.scope.empty()) j["scope"] = t.scope;
  return j;
}

Result<int64_t> ExpiryFromJson(const std::optional<std::string>& text, int64_t now_ms,
                               int64_t def_ms, const std::string& field) {
  if (!text) return def_ms == 0 ? 0 : now_ms + def_ms;
  if (*text == "never") return int64_t{0};
  auto s = ParseDurationSeconds(*text);
  if (!s.ok() || *s <= 0) {
    return Status::InvalidArgument(
        "\"" + *text + "\" is not a duration such as 30d, 12h or 90m (or \"never\")", field);
  }
  return now_ms + *s * 1000;
}

Response Api::Tokens(const Request& req, const Caller& caller, const Segments& seg) {
  if (caller.scope != Scope::kUser) {
    return ErrorResponse(Status::PermissionDenied(
        "/v1/tokens are a user's own tokens (the operator's are under /v1/admin)"));
  }
  if (seg.size() == 2 && req.method == "GET") {
    json list = json::array();
    for (const TokenInfo& t : core_->ListTokens(caller)) {
      json j = TokenJson(t);
      j["current"] = t.id == caller.token_id;
      list.push_back(j);
    }
    return JsonResponse(200, {{"tokens", list}});
  }
  if (seg.size() == 2 && req.method == "POST") {
    auto body = ParseBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    JsonReader r(*body, "");
    auto name = r.String("name", true);
    auto scope = r.String("scope");
    auto expires = r.String("expires");
    if (Status st = r.Finish(); !st.ok()) return ErrorResponse(st);
    auto at = ExpiryFromJson(expires, clock_->NowMs(), 0, "expires");
    if (!at.ok()) return ErrorResponse(at.status());
    auto made = core_->CreateToken(caller, *name, scope.value_or(""), *at);
    if (!made.ok()) return ErrorResponse(made.status());
    json j = TokenJson(made->first);
    j["token"] = made->second;
    return JsonResponse(201, j);
  }
  if (seg.size() == 3 && req.method == "DELETE") {
    if (Status st = core_->RevokeToken(caller, seg[2]); !st.ok()) return ErrorResponse(st);
    return JsonResponse(200, {{"revoked", seg[2]}});
  }
  if (seg.size() == 4 && seg[3] == "rotate" && req.method == "POST") {
    auto body = ParseBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    JsonReader r(*body, "");
    auto grace = r.String("grace");
    if (Status st = r.Finish(); !st.ok()) return ErrorResponse(st);
    int64_t grace_ms = 0;
    if (grace) {
      auto s = ParseDurationSeconds(*grace);
      if (!s.ok()) {
        return ErrorResponse(Status::InvalidArgument(
            "\"" + *grace + "\" is not a duration such as 1h, 30m or 0", "grace"));
      }
      grace_ms = *s * 1000;
    }
    auto made = core_->RotateToken(caller, seg[2], grace_ms);
    if (!made.ok()) return ErrorResponse(made.status());
    json j = TokenJson(made->first);
    j["token"] = made->second;
    j["old_expires_at"] = grace_ms == 0 ? clock_->NowMs() : clock_->NowMs() + grace_ms;
    return JsonResponse(201, j);
  }
  return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
}

}  // namespace tide::server
