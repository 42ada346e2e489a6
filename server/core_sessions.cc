// Core's doors for the console's sessions: logging in with a token or a
// one-time login link, and out. A session is a token row of kind "session"
// (server/tokens.h) whose secret only ever travels in an HttpOnly cookie.
#include <algorithm>
#include <utility>
#include <vector>

#include "common/token.h"
#include "server/core.h"

namespace tide::server {

namespace {

// The scope a session keeps of what it was made from: a user's token
// scope ("", "read", "submit") or "admin".
std::string SessionScope(const Caller& c) {
  if (c.scope == Scope::kAdmin) return "admin";
  return c.access == Access::kFull ? "" : AccessName(c.access);
}

}  // namespace

std::string Core::UserName(const Caller& caller) const {
  if (caller.scope != Scope::kUser) return "";
  ReaderLock lock(state_mu_);
  auto it = users_.find(caller.subject);
  return it == users_.end() ? "" : it->second.name;
}

Result<SessionInfo> Core::CreateSession(const std::string& token, const std::string& address) {
  if (token.empty()) return Status::InvalidArgument("give a user token or the admin token", "token");
  auto from = Authenticate(token);
  if (!from.ok()) return from.status();
  if (from->session) return Status::InvalidArgument("a session cannot make another", "token");
  if (from->scope != Scope::kUser && from->scope != Scope::kAdmin) {
    return Status::PermissionDenied(
        "agents' tokens cannot log in to the console: use a user token or the admin token");
  }
  from->address = address;
  const int64_t now = clock_->NowMs();
  SessionInfo out;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    auto checked = tokens_.Check(Sha256Hex(token), now);  // not revoked meanwhile
    if (!checked.ok()) return checked.status();
    const store::TokenRow* parent = *checked;
    store::TokenRow row;
    row.kind = "session";
    row.subject = from->subject;
    row.name = Tokens::IdOf(*parent);
    row.scope = SessionScope(*from);
    row.expires_at = now + kSessionLifeMs;
    if (parent->expires_at != 0) row.expires_at = std::min(row.expires_at, parent->expires_at);
    // A token keeps its newest sessions: logging in again and again ends
    // the oldest, rather than piling up rows.
    std::vector<std::pair<int64_t, std::string>> older;  // created_at, hash
    for (const std::string& h : tokens_.HashesWhere([&](const store::TokenRow& r) {
           return r.kind == "session" && r.name == row.name;
         })) {
      auto existing = tokens_.Check(h, now);
      if (existing.ok()) older.emplace_back((*existing)->created_at, h);
    }
    std::sort(older.begin(), older.end());
    for (size_t i = 0; i + kMaxSessionsPerToken <= older.size(); ++i) {
      tokens_.Revoke(older[i].second, batch);
    }
    out.secret = tokens_.Issue("tide_s_", row, now, batch);
    out.id = Tokens::IdOf(*tokens_.Check(Sha256Hex(out.secret), now).value());
    out.expires_at = row.expires_at;
    audit_.Record(batch, now, *from, "session.create", out.id, {{"expires_at", row.expires_at}});
    return Status::Ok();
  });
  if (!st.ok()) return st;
  out.caller = *from;
  out.caller.session = true;
  out.caller.token_id = out.id;
  out.user_name = UserName(out.caller);
  return out;
}

Result<std::pair<std::string, int64_t>> Core::CreateLoginCode(const Caller& by,
                                                              const std::string& user) {
  if (by.scope != Scope::kAdmin) {
    return Status::PermissionDenied("only the operator makes login links");
  }
  std::string user_id;
  if (!user.empty()) {
    auto found = FindUser(user);
    if (!found.ok()) return Status::NotFound("no user " + user);
    user_id = *found;
  }
  const int64_t now = clock_->NowMs();
  std::pair<std::string, int64_t> out;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    store::TokenRow row;
    row.kind = "login";
    row.subject = user_id.empty() ? "admin" : user_id;
    row.scope = user_id.empty() ? "admin" : "";
    row.expires_at = now + kLoginCodeLifeMs;
    out.first = tokens_.Issue("tide_l_", row, now, batch);
    out.second = row.expires_at;
    audit_.Record(batch, now, by, "login_link.create",
                  Tokens::IdOf(*tokens_.Check(Sha256Hex(out.first), now).value()),
                  {{"user", row.subject}});
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

Result<SessionInfo> Core::RedeemLoginCode(const std::string& code, const std::string& address) {
  if (code.empty()) return Status::InvalidArgument("the login link has no code", "code");
  const std::string hash = Sha256Hex(code);
  const int64_t now = clock_->NowMs();
  SessionInfo out;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    auto row = tokens_.Check(hash, now);
    if (!row.ok() || (*row)->kind != "login") {
      return Status::Unauthenticated(
          "this login link has expired or was used already: ask for a new one, or log in with a "
          "token");
    }
    store::TokenRow session;
    session.kind = "session";
    session.subject = (*row)->subject;
    session.scope = (*row)->scope;
    session.name = Tokens::IdOf(**row);
    session.expires_at = now + kSessionLifeMs;
    tokens_.Revoke(hash, batch);  // a link works once
    out.secret = tokens_.Issue("tide_s_", session, now, batch);
    out.id = Tokens::IdOf(*tokens_.Check(Sha256Hex(out.secret), now).value());
    out.expires_at = session.expires_at;
    Caller actor = session.scope == "admin" ? AdminCaller() : Caller{Scope::kUser, session.subject};
    actor.address = address;
    actor.token_id = out.id;
    audit_.Record(batch, now, actor, "session.create", out.id,
                  {{"expires_at", session.expires_at}, {"from", "login_link"}});
    return Status::Ok();
  });
  if (!st.ok()) return st;
  auto caller = Authenticate(out.secret);
  if (!caller.ok()) return caller.status();
  out.caller = *caller;
  out.user_name = UserName(out.caller);
  return out;
}

void Core::EndSessionsOf(const std::string& token_id, store::WriteBatch& batch, int64_t at) {
  for (const std::string& hash : tokens_.HashesWhere([&](const store::TokenRow& r) {
         return r.kind == "session" && r.name == token_id;
       })) {
    if (at == 0) {
      tokens_.Revoke(hash, batch);
    } else {
      tokens_.ExpireAt(hash, at, batch);
    }
  }
}

Status Core::EndSession(const Caller& caller) {
  if (!caller.session) return Status::InvalidArgument("not a console session", "session");
  return Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    const store::TokenRow* row = tokens_.FindId("session", caller.token_id);
    if (row == nullptr) return Status::Ok();  // ended already
    tokens_.Revoke(row->hash, batch);
    audit_.Record(batch, clock_->NowMs(), caller, "session.end", caller.token_id);
    return Status::Ok();
  });
}

std::vector<TokenInfo> Core::ListSessions(const Caller& caller) const {
  ReaderLock lock(state_mu_);
  return tokens_.List("session", &caller.subject, clock_->NowMs());
}

Status Core::EndSessionById(const Caller& caller, const std::string& id) {
  if (caller.scope == Scope::kUser && caller.access != Access::kFull) {
    return Status::PermissionDenied(std::string("a credential of scope ") + AccessName(caller.access) +
                                    " cannot end sessions: use one of scope full");
  }
  return Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    const store::TokenRow* row = tokens_.FindId("session", id);
    if (row == nullptr || row->subject != caller.subject ||
        (row->expires_at != 0 && row->expires_at <= clock_->NowMs())) {
      return Status::NotFound("no session " + id);
    }
    tokens_.Revoke(row->hash, batch);
    audit_.Record(batch, clock_->NowMs(), caller, "session.end", id);
    return Status::Ok();
  });
}

}  // namespace tide::server
