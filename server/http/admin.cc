// /v1/admin/... (admin token) and /v1/nodes.
#include "api/telemetry.h"
#include "api/types.h"
#include "common/json_reader.h"
#include "common/tls.h"
#include "common/token.h"
#include "server/http/api.h"

namespace tide::server {

using nlohmann::json;

namespace {

constexpr int64_t kJoinTokenLifeMs = 24 * 3'600'000;  // a join token's default life

Status CheckUserName(const std::string& name, const std::string& field) {
  bool ok = !name.empty() && name.size() <= 64;
  for (char c : name) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
                c == '@');
  }
  if (!ok) return Status::InvalidArgument("1 to 64 letters, digits or - _ . @", field);
  return Status::Ok();
}

}  // namespace

Response Api::Admin(const Request& req, const Caller& caller, const Segments& seg) {
  if (caller.scope != Scope::kAdmin) {
    return ErrorResponse(Status::PermissionDenied("this route needs an admin token"));
  }
  if (seg.size() == 3 && seg[2] == "users" && req.method == "GET") {
    UserStandings st = core_->Users();
    json users = json::array();
    for (const UserStanding& u : st.users) {
      users.push_back({{"id", u.user.id},
                       {"name", u.user.name},
                       {"created_at", u.user.created_at},
                       {"weight", u.weight},
                       {"usage_gpu_s", u.usage_gpu_s},
                       {"share", u.share},
                       {"usage_share", u.usage_share},
                       {"running_jobs", u.running_jobs},
                       {"running_gpus", u.running_gpus},
                       {"queued_jobs", u.queued_jobs},
                       {"queued_gpus", u.queued_gpus},
                       {"score", u.score},
                       {"rank", u.rank > 0 ? json(u.rank) : json(nullptr)},
                       {"balance", Credits(u.available)},
                       {"escrow", Credits(u.escrow)},
                       {"daily_cap", u.daily_cap > 0 ? json(Credits(u.daily_cap)) : json(nullptr)}});
    }
    return JsonResponse(200, {{"users", users}, {"half_life_s", st.half_life_ms / 1000}, {"at", st.at}});
  }
  if (seg.size() == 3 && seg[2] == "users" && req.method == "POST") {
    auto body = ParseBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    JsonReader r(*body, "");
    auto name = r.String("name", true);
    Status st = r.Finish();
    if (st.ok()) st = CheckUserName(*name, "name");
    if (!st.ok()) return ErrorResponse(st);
    auto user = core_->CreateUser(caller, *name);
    if (!user.ok()) return ErrorResponse(user.status());
    return JsonResponse(201, {{"id", user->first.id}, {"name", user->first.name},
                              {"token", user->second}});
  }
  if (seg.size() >= 3 && (seg[2] == "prices" || seg[2] == "cards" || seg[2] == "ledger" ||
                          (seg[2] == "users" && seg.size() == 5 && seg[4] == "daily-cap"))) {
    return AdminMoney(req, caller, seg);
  }
  if (seg.size() == 5 && seg[2] == "users" && seg[4] == "weight" &&
      (req.method == "PUT" || req.method == "GET")) {
    auto user = core_->FindUser(seg[3]);
    if (!user.ok()) return ErrorResponse(user.status());
    if (req.method == "PUT") {
      auto body = ParseBody(req);
      if (!body.ok()) return ErrorResponse(body.status());
      JsonReader r(*body, "");
      auto weight = r.Number("weight", true);
      if (Status st = r.Finish(); !st.ok()) return ErrorResponse(st);
      if (Status st = core_->SetWeight(caller, *user, *weight); !st.ok()) return ErrorResponse(st);
    }
    return JsonResponse(200, {{"user", *user}, {"weight", core_->Weight(*user)}});
  }
  if (seg.size() == 3 && seg[2] == "login-links" && req.method == "POST") {
    // A one-time link into the console for a user (or the operator): what
    // `tide dev` prints, and how an operator lets someone in who has no
    // token at hand.
    auto body = ParseBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    JsonReader r(*body, "");
    auto user = r.String("user");
    if (Status st = r.Finish(); !st.ok()) return ErrorResponse(st);
    auto made = core_->CreateLoginCode(caller, user.value_or(""));
    if (!made.ok()) {
      Status st = made.status();
      if (st.IsNotFound()) st = Status::InvalidArgument(st.message(), "user");
      return ErrorResponse(st);
    }
    return JsonResponse(201, {{"code", made->first},
                              {"path", "/login?code=" + made->first},
                              {"expires_at", made->second}});
  }
  if (seg.size() == 3 && seg[2] == "join-tokens" && req.method == "POST") {
    // Agents that join with it belong to the provider named, if any; with
    // create_provider a provider account that does not exist yet is created
    // (and its API token returned once, for `tide provider earnings`).
    auto body = ParseBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    JsonReader r(*body, "");
    auto provider = r.String("provider");
    auto create = r.Bool("create_provider");
    auto expires = r.String("expires");
    if (Status st = r.Finish(); !st.ok()) return ErrorResponse(st);
    // Join tokens expire: a day unless asked otherwise, as kubeadm's do.
    auto expires_at = ExpiryFromJson(expires, clock_->NowMs(), kJoinTokenLifeMs, "expires");
    if (!expires_at.ok()) return ErrorResponse(expires_at.status());
    json answer = json::object();
    std::string provider_id;
    if (provider && !provider->empty()) {
      auto id = core_->FindUser(*provider);
      if (!id.ok() && create.value_or(false)) {
        if (Status st = CheckUserName(*provider, "provider"); !st.ok()) return ErrorResponse(st);
        auto user = core_->CreateUser(caller, *provider);
        if (!user.ok()) return ErrorResponse(user.status());
        id = user->first.id;
        answer["provider_created"] = true;
        answer["provider_token"] = user->second;
      }
      if (!id.ok()) {
        return ErrorResponse(Status::InvalidArgument(
            "no user " + *provider + " (create it with \"create_provider\": true, or tide admin user add " +
                *provider + ")",
            "provider"));
      }
      provider_id = *id;
      answer["provider"] = *provider;
      answer["provider_id"] = provider_id;
    }
    auto token = core_->CreateJoinToken(caller, provider_id, *expires_at);
    if (!token.ok()) return ErrorResponse(token.status());
    answer["id"] = TokenId(*token);
    answer["expires_at"] = *expires_at;
    // The pins let an agent verify this server without a CA.
    std::vector<std::string> pins = tls_pins();
    answer["token"] = tls::JoinTokenWithPins(*token, pins);
    if (!pins.empty()) answer["pins"] = pins;
    return JsonResponse(201, answer);
  }
  if (seg.size() == 3 && seg[2] == "join-tokens" && req.method == "GET") {
    json list = json::array();
    for (const TokenInfo& t : core_->ListJoinTokens()) {
      json j = TokenJson(t);
      j.erase("name");
      if (!t.subject.empty()) j["provider_id"] = t.subject;
      list.push_back(j);
    }
    return JsonResponse(200, {{"join_tokens", list}});
  }
  if (seg.size() == 4 && seg[2] == "join-tokens" && req.method == "DELETE") {
    if (Status st = core_->RevokeJoinToken(caller, seg[3]); !st.ok()) return ErrorResponse(st);
    return JsonResponse(200, {{"revoked", seg[3]}});
  }
  if (seg.size() == 5 && seg[2] == "nodes" && seg[4] == "revoke" && req.method == "POST") {
    auto node = core_->RevokeNode(caller, seg[3]);
    if (!node.ok()) return ErrorResponse(node.status());
    return JsonResponse(200, {{"id", node->id}, {"name", node->name}, {"revoked", true}});
  }
  if (seg.size() == 5 && seg[2] == "nodes" && (seg[4] == "drain" || seg[4] == "undrain") &&
      req.method == "POST") {
    std::string evict = req.Query("evict");
    if (!evict.empty() && evict != "true" && evict != "false") {
      return ErrorResponse(Status::InvalidArgument("must be true or false", "evict"));
    }
    auto node = core_->SetDraining(caller, seg[3], seg[4] == "drain", evict == "true");
    if (!node.ok()) return ErrorResponse(node.status());
    return JsonResponse(200, api::ToJson(*node));
  }
  if (seg.size() == 3 && seg[2] == "tokens" && req.method == "GET") {
    // Users' tokens: all, or one user's (?user=NAME or ID).
    std::string user_id;
    if (std::string user = req.Query("user"); !user.empty()) {
      auto id = core_->FindUser(user);
      if (!id.ok()) return ErrorResponse(Status::InvalidArgument("no user " + user, "user"));
      user_id = *id;
    }
    json list = json::array();
    for (const TokenInfo& t : core_->ListUserTokens(user_id)) {
      json j = TokenJson(t);
      j["user_id"] = t.subject;
      if (!j.contains("scope")) j["scope"] = "full";
      list.push_back(j);
    }
    return JsonResponse(200, {{"tokens", list}});
  }
  if (seg.size() == 4 && seg[2] == "tokens" && req.method == "DELETE") {
    if (Status st = core_->RevokeUserToken(caller, seg[3]); !st.ok()) return ErrorResponse(st);
    return JsonResponse(200, {{"revoked", seg[3]}});
  }
  if (seg.size() == 3 && seg[2] == "audit" && req.method == "GET") {
    auto since = QueryInt(req, "since", 0, 0, int64_t{1} << 50);
    if (!since.ok()) return ErrorResponse(since.status());
    auto limit = QueryInt(req, "limit", 1000, 1, 100'000);
    if (!limit.ok()) return ErrorResponse(limit.status());
    json entries = json::array();
    for (const AuditEntry& e : core_->AuditLog(*since, static_cast<size_t>(*limit))) {
      entries.push_back(ToJson(e));
    }
    return JsonResponse(200, {{"entries", entries}});
  }
  return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
}

Response Api::Nodes(const Request& req, const Caller& caller, const Segments& seg) {
  if (req.method != "GET") return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
  auto nodes = core_->ListNodes();
  bool admin = caller.scope == Scope::kAdmin;
  auto to_json = [admin](const NodeStatus& n) {
    json j = api::ToJson(n.node);
    json leases = json::object();
    int used = 0;
    for (auto& [job, gpus] : n.leases) {
      leases[job] = gpus;
      used += static_cast<int>(gpus.size());
    }
    if (admin) j["leases"] = leases;  // job ids of every user: operators only
    j["free_gpus"] = static_cast<int>(n.node.gpus.size()) - used;
    j["running_jobs"] = n.leases.size();
    j["reliability"] = n.reliability;
    return j;
  };
  if (seg.size() == 2) {
    json list = json::array();
    for (auto& n : nodes) list.push_back(to_json(n));
    return JsonResponse(200, {{"nodes", list}});
  }
  if (seg.size() == 3) {
    for (auto& n : nodes) {
      if (n.node.id == seg[2] || n.node.name == seg[2]) return JsonResponse(200, to_json(n));
    }
    return ErrorResponse(Status::NotFound("no node " + seg[2]));
  }
  if (seg.size() == 4 && seg[3] == "telemetry") {
    for (auto& [k, v] : req.query) {
      if (k != "series") return ErrorResponse(Status::InvalidArgument("unknown query parameter", k));
    }
    auto series = QueryBool(req, "series", true);
    if (!series.ok()) return ErrorResponse(series.status());
    auto t = core_->NodeTelemetry(caller, seg[2], *series);
    if (!t.ok()) return ErrorResponse(t.status());
    return JsonResponse(200, api::ToJson(*t));
  }
  return ErrorResponse(Status::NotFound("no route " + req.method + " " + req.path));
}

}  // namespace tide::server
