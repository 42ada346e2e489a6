// /v1/session: the web console's login (a token, or a one-time login link
// at /login?code=…) and logout, and what a session cookie must bring with
// every change (docs/security.md, "The console").
#include <cctype>

#include "common/json_reader.h"
#include "common/tls.h"
#include "common/token.h"
#include "server/http/api.h"

namespace tide::server {

using nlohmann::json;

std::string SessionCookieName(bool secure) {
  // The __Host- prefix makes a browser keep the cookie only if it came
  // over HTTPS, for this host alone, for every path.
  return secure ? "__Host-tide_session" : "tide_session";
}

std::string CsrfOf(const std::string& session_secret) {
  return Sha256Hex("tide-csrf\n" + session_secret).substr(0, 32);
}

namespace {

std::string SessionCookie(const Request& req, const std::string& value, int64_t max_age_s) {
  std::string c = SessionCookieName(req.secure) + "=" + value +
                  "; Path=/; HttpOnly; SameSite=Strict; Max-Age=" + std::to_string(max_age_s);
  if (req.secure) c += "; Secure";
  return c;
}

json SessionJson(const Caller& caller, const std::string& user_name, int64_t expires_at) {
  bool admin = caller.scope == Scope::kAdmin;
  return {{"user", admin ? "admin" : user_name},
          {"user_id", admin ? "" : caller.subject},
          {"kind", admin ? "admin" : "user"},
          {"scope", admin ? "full" : AccessName(caller.access)},
          {"session", caller.session},
          {"expires_at", expires_at}};
}

// A cross-site request never acts with the console's cookie: browsers say
// where a request comes from in Sec-Fetch-Site.
Status SameSite(const Request& req) {
  std::string site = req.Header("sec-fetch-site");
  if (site.empty() || site == "same-origin" || site == "none") return Status::Ok();
  return Status::PermissionDenied("a request from another site (Sec-Fetch-Site: " + site +
                                  ") cannot use the console's session");
}

}  // namespace

Status CheckSessionRequest(const Request& req, const std::string& session_secret) {
  TIDE_RETURN_IF_ERROR(SameSite(req));
  if (req.method == "GET" || req.method == "HEAD") return Status::Ok();
  if (!ConstantTimeEquals(req.Header("x-tide-csrf"), CsrfOf(session_secret))) {
    return Status::PermissionDenied(
        "a change made with the console's session needs its X-Tide-CSRF header (the csrf of "
        "POST or GET /v1/session)");
  }
  return Status::Ok();
}

Response Api::Login(const Request& req) {
  // Every try counts against the address, as a request without a valid
  // token does: a guesser is slowed down.
  if (auto limited = Limited(address_limits_.get(), "address " + req.remote_addr, req.remote_addr)) {
    return *limited;
  }
  if (Status st = SameSite(req); !st.ok()) return ErrorResponse(st);
  // A form on another site cannot send JSON without asking first (CORS),
  // and this server never says yes: no login is made for someone else.
  std::string type = req.Header("content-type");
  type = type.substr(0, type.find(';'));
  while (!type.empty() && type.back() == ' ') type.pop_back();
  for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (type != "application/json") {
    return ErrorResponse(Status::InvalidArgument(
        "log in with a JSON body {\"token\": \"tide_u_…\"} and Content-Type: application/json",
        "body"));
  }
  auto body = ParseBody(req);
  if (!body.ok()) return ErrorResponse(body.status());
  JsonReader r(*body, "");
  auto token = r.String("token", true);
  if (Status st = r.Finish(); !st.ok()) return ErrorResponse(st);
  // A join token as printed carries pins after its secret: it is still an
  // agent's, and is refused as one.
  std::string secret = *token;
  if (auto join = tls::SplitJoinToken(secret, "token"); join.ok()) secret = join->secret;
  auto made = core_->CreateSession(secret, req.remote_addr);
  if (!made.ok()) return ErrorResponse(made.status());
  json j = SessionJson(made->caller, made->user_name, made->expires_at);
  j["csrf"] = CsrfOf(made->secret);
  Response res = JsonResponse(201, j);
  res.headers["Set-Cookie"] =
      SessionCookie(req, made->secret, (made->expires_at - clock_->NowMs()) / 1000);
  res.headers["Cache-Control"] = "no-store";
  return res;
}

Response Api::LoginLink(const Request& req) {
  auto redirect = [](const std::string& to) {
    Response res;
    res.status = 303;
    res.content_type = "text/plain; charset=utf-8";
    res.headers["Location"] = to;
    res.headers["Cache-Control"] = "no-store";
    return res;
  };
  if (auto limited = Limited(address_limits_.get(), "address " + req.remote_addr, req.remote_addr)) {
    return *limited;
  }
  auto made = core_->RedeemLoginCode(req.Query("code"), req.remote_addr);
  if (!made.ok()) return redirect("/login?error=link");
  Response res = redirect("/jobs");
  res.headers["Set-Cookie"] =
      SessionCookie(req, made->secret, (made->expires_at - clock_->NowMs()) / 1000);
  return res;
}

Response Api::Session(const Request& req, const Caller& caller, const std::string& secret) {
  if (caller.scope != Scope::kUser && caller.scope != Scope::kAdmin) {
    return ErrorResponse(Status::PermissionDenied("agents' tokens have no console session"));
  }
  if (req.method == "GET") {
    json j = SessionJson(caller, core_->UserName(caller), caller.expires_at);
    if (caller.session) j["csrf"] = CsrfOf(secret);
    Response res = JsonResponse(200, j);
    res.headers["Cache-Control"] = "no-store";
    return res;
  }
  if (req.method == "DELETE") {
    if (Status st = core_->EndSession(caller); !st.ok()) return ErrorResponse(st);
    Response res = JsonResponse(200, {{"ended", true}});
    res.headers["Set-Cookie"] = SessionCookie(req, "", 0);
    return res;
  }
  return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
}

// GET /v1/sessions: the caller's console sessions; DELETE
// /v1/sessions/{id} ends one (a browser left logged in elsewhere).
Response Api::Sessions(const Request& req, const Caller& caller, const Segments& seg) {
  if (caller.scope != Scope::kUser && caller.scope != Scope::kAdmin) {
    return ErrorResponse(Status::PermissionDenied("agents' tokens have no console sessions"));
  }
  if (seg.size() == 2 && req.method == "GET") {
    json list = json::array();
    for (const TokenInfo& t : core_->ListSessions(caller)) {
      json j = TokenJson(t);
      j.erase("name");
      j["token"] = t.name;  // the token it was made from
      j["current"] = caller.session && t.id == caller.token_id;
      list.push_back(j);
    }
    return JsonResponse(200, {{"sessions", list}});
  }
  if (seg.size() == 3 && req.method == "DELETE") {
    if (Status st = core_->EndSessionById(caller, seg[2]); !st.ok()) return ErrorResponse(st);
    return JsonResponse(200, {{"ended", seg[2]}});
  }
  return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
}

}  // namespace tide::server
