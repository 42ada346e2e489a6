// The core's public commands and reads. A command checks what it can
// without the state, then runs a closure over the rooms on the core thread
// (Run); a read takes the state's shared lock.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>

#include "common/token.h"
#include "ledger/cards.h"
#include "scheduler/estimate.h"
#include "scheduler/rank.h"
#include "server/core.h"

namespace tide::server {

using api::Job;
using api::JobStatus;
using ledger::Micros;

namespace {
Status NoCode(const std::string& field) {
  return Status::InvalidArgument("no uploaded code archive with this id (POST /v1/code first)",
                                 field);
}
}  // namespace

// ------------------------------------------------------------------ identity

Result<Caller> Core::Authenticate(const std::string& bearer_token) const {
  if (bearer_token.empty()) return Status::Unauthenticated("missing bearer token");
  std::string hash = Sha256Hex(bearer_token);
  const int64_t now = clock_->NowMs();
  ReaderLock lock(state_mu_);
  auto row = tokens_.Check(hash, now);
  if (!row.ok()) return row.status();
  tokens_.Used(hash, now);
  const store::TokenRow& r = **row;
  Caller caller;
  caller.token_id = Tokens::IdOf(r);
  caller.token_hash = hash;
  caller.expires_at = r.expires_at;
  if (r.kind == "admin") {
    caller.scope = Scope::kAdmin;
    caller.subject = "admin";
  } else if (r.kind == "user") {
    auto access = ParseAccess(r.scope, "scope");
    if (!access.ok()) return Status::Unauthenticated("invalid token");
    caller.scope = Scope::kUser;
    caller.subject = r.subject;
    caller.access = *access;
  } else if (r.kind == "join") {
    caller.scope = Scope::kJoin;
    caller.subject = r.subject;  // the provider
  } else if (r.kind == "node") {
    caller.scope = Scope::kNode;
    caller.subject = r.subject;
  } else if (r.kind == "session") {
    caller.session = true;
    caller.parent_token = r.name;
    if (r.scope == "admin") {
      caller.scope = Scope::kAdmin;
      caller.subject = "admin";
    } else {
      auto access = ParseAccess(r.scope, "scope");
      if (!access.ok()) return Status::Unauthenticated("invalid session");
      caller.scope = Scope::kUser;
      caller.subject = r.subject;
      caller.access = *access;
    }
  } else {
    return Status::Unauthenticated("invalid token");
  }
  return caller;
}

bool Core::CredentialValid(const Caller& caller) const {
  if (caller.token_hash.empty()) return true;  // the server's own callers
  ReaderLock lock(state_mu_);
  return tokens_.Check(caller.token_hash, clock_->NowMs()).ok();
}

bool Core::Visible(const Caller& caller, const Job& job) const {
  return caller.scope == Scope::kAdmin || job.owner == caller.subject;
}

bool Core::MayUseBatch(const Caller& caller, const std::string& batch_id) const {
  return batches_.Find(batch_id, caller.scope == Scope::kAdmin ? "" : caller.subject) != nullptr;
}

bool Core::Replayed(const Caller& caller, const std::string& key, std::string* id) const {
  if (key.empty()) return false;
  auto it = idempotency_.find({caller.subject, key});
  if (it == idempotency_.end()) return false;
  *id = it->second;
  return true;
}

void Core::Remember(const Caller& caller, const std::string& key, const std::string& id,
                    store::WriteBatch& batch) {
  if (key.empty()) return;
  idempotency_[{caller.subject, key}] = id;
  batch.idempotency.push_back({caller.subject, key, id});
}

Result<std::pair<UserInfo, std::string>> Core::CreateUser(const Caller& by, const std::string& name) {
  UserInfo user;
  std::string token;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    if (user_names_.count(name)) return Status::Conflict("user \"" + name + "\" already exists");
    user = UserInfo{NewId("u-"), name, clock_->NowMs()};
    users_[user.id] = user;
    user_names_[name] = user.id;
    store::TokenRow row;
    row.kind = "user";
    row.subject = user.id;
    token = tokens_.Issue("tide_u_", row, user.created_at, batch);
    batch.users.push_back({user.id, user.name, user.created_at});
    audit_.Record(batch, user.created_at, by, "user.create", user.id, {{"name", name}});
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return std::make_pair(user, token);
}

Result<std::string> Core::FindUser(const std::string& id_or_name) const {
  ReaderLock lock(state_mu_);
  if (users_.count(id_or_name)) return id_or_name;
  auto it = user_names_.find(id_or_name);
  if (it != user_names_.end()) return it->second;
  return Status::NotFound("no user " + id_or_name);
}

Result<std::string> Core::CreateJoinToken(const Caller& by, const std::string& provider,
                                          int64_t expires_at) {
  std::string token;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    if (!provider.empty() && !users_.count(provider)) return Status::NotFound("no user " + provider);
    store::TokenRow row;
    row.kind = "join";
    row.subject = provider;
    row.expires_at = expires_at;
    token = tokens_.Issue("tide_j_", row, clock_->NowMs(), batch);
    row.hash = Sha256Hex(token);
    audit_.Record(batch, clock_->NowMs(), by, "join_token.create", Tokens::IdOf(row),
                  {{"provider", provider}, {"expires_at", expires_at}});
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return token;
}

std::vector<TokenInfo> Core::ListJoinTokens() const {
  ReaderLock lock(state_mu_);
  return tokens_.List("join", nullptr, clock_->NowMs());
}

Status Core::RevokeJoinToken(const Caller& by, const std::string& id) {
  return Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    const store::TokenRow* row = tokens_.Find("join", nullptr, id);
    if (row == nullptr) return Status::NotFound("no join token " + id);
    std::string revoked = Tokens::IdOf(*row);
    tokens_.Revoke(row->hash, batch);
    audit_.Record(batch, clock_->NowMs(), by, "join_token.revoke", revoked);
    return Status::Ok();
  });
}

Result<api::Node> Core::RevokeNode(const Caller& by, const std::string& id_or_name) {
  api::Node out;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    auto node = reconciler_.Revoke(id_or_name);
    if (!node.ok()) return node.status();
    tokens_.RevokeAll("node", node->id, batch);
    out = *node;
    audit_.Record(batch, clock_->NowMs(), by, "node.revoke", node->id, {{"name", node->name}});
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

// ------------------------------------------------------------------ tokens

namespace {

// Names: 1-64 of [a-z0-9._-], starting with a letter or digit ("main" is
// the user's first token).
Status CheckTokenName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 64 && std::isalnum(static_cast<unsigned char>(name[0]));
  for (char c : name) {
    ok = ok && (std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) ||
                c == '.' || c == '_' || c == '-');
  }
  if (!ok) {
    return Status::InvalidArgument(
        "token name \"" + name + "\" must be 1-64 of a-z, 0-9, '.', '_' and '-', starting with a "
        "letter or digit",
        "name");
  }
  return Status::Ok();
}

// Only a token of full scope manages tokens: a narrower one must not mint
// a wider one, nor revoke its owner's others.
Status MayManageTokens(const Caller& caller) {
  if (caller.scope != Scope::kUser) return Status::PermissionDenied("tokens belong to users");
  if (caller.access != Access::kFull) {
    return Status::PermissionDenied(std::string("a token of scope ") + AccessName(caller.access) +
                                    " cannot manage tokens: use one of scope full");
  }
  return Status::Ok();
}

}  // namespace

Result<std::pair<TokenInfo, std::string>> Core::CreateToken(const Caller& caller,
                                                            const std::string& name,
                                                            const std::string& scope,
                                                            int64_t expires_at) {
  TIDE_RETURN_IF_ERROR(MayManageTokens(caller));
  TIDE_RETURN_IF_ERROR(CheckTokenName(name));
  auto access = ParseAccess(scope, "scope");
  if (!access.ok()) return access.status();
  const int64_t now = clock_->NowMs();
  if (expires_at != 0 && expires_at <= now) {
    return Status::InvalidArgument("expires must be in the future", "expires");
  }
  std::pair<TokenInfo, std::string> out;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    if (tokens_.Find("user", &caller.subject, name) != nullptr) {
      return Status::Conflict("you already have a token named " + name +
                              " (tide token ls; revoke it or choose another name)");
    }
    store::TokenRow row;
    row.kind = "user";
    row.subject = caller.subject;
    row.name = name;
    row.scope = *access == Access::kFull ? "" : AccessName(*access);
    row.expires_at = expires_at;
    out.second = tokens_.Issue("tide_u_", row, now, batch);
    out.first = tokens_.Info(*tokens_.Check(Sha256Hex(out.second), now).value());
    audit_.Record(batch, now, caller, "token.create", out.first.id,
                  {{"name", name}, {"scope", out.first.scope}, {"expires_at", expires_at}});
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

std::vector<TokenInfo> Core::ListTokens(const Caller& caller) const {
  ReaderLock lock(state_mu_);
  return tokens_.List("user", &caller.subject, clock_->NowMs());
}

Status Core::RevokeToken(const Caller& caller, const std::string& name_or_id) {
  TIDE_RETURN_IF_ERROR(MayManageTokens(caller));
  return Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    const store::TokenRow* row = tokens_.Find("user", &caller.subject, name_or_id);
    if (row == nullptr) return Status::NotFound("no token " + name_or_id + " (tide token ls)");
    TokenInfo revoked = tokens_.Info(*row);
    tokens_.Revoke(row->hash, batch);
    EndSessionsOf(revoked.id, batch, 0);
    audit_.Record(batch, clock_->NowMs(), caller, "token.revoke", revoked.id,
                  {{"name", revoked.name}});
    return Status::Ok();
  });
}

Result<std::pair<TokenInfo, std::string>> Core::RotateToken(const Caller& caller,
                                                            const std::string& name_or_id,
                                                            int64_t grace_ms) {
  TIDE_RETURN_IF_ERROR(MayManageTokens(caller));
  if (grace_ms < 0) return Status::InvalidArgument("grace must not be negative", "grace");
  const int64_t now = clock_->NowMs();
  std::pair<TokenInfo, std::string> out;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    const store::TokenRow* old = tokens_.Find("user", &caller.subject, name_or_id);
    if (old == nullptr || (old->expires_at != 0 && old->expires_at <= now)) {
      return Status::NotFound("no token " + name_or_id + " (tide token ls)");
    }
    store::TokenRow fresh = *old;
    std::string old_hash = old->hash;
    std::string old_id = Tokens::IdOf(*old);
    // The old one is renamed so that the name passes to the new one; it
    // lives out its grace under "NAME~old".
    store::TokenRow renamed = *old;
    renamed.name = (old->name.empty() ? "main" : old->name) + "~old";
    while (tokens_.Find("user", &caller.subject, renamed.name) != nullptr) renamed.name += "~";
    out.second = tokens_.Issue("tide_u_", fresh, now, batch);
    tokens_.Rename(old_hash, renamed.name, batch);
    if (grace_ms == 0) {
      tokens_.Revoke(old_hash, batch);
    } else {
      tokens_.ExpireAt(old_hash, now + grace_ms, batch);
    }
    EndSessionsOf(old_id, batch, now + grace_ms);
    out.first = tokens_.Info(*tokens_.Check(Sha256Hex(out.second), now).value());
    audit_.Record(batch, now, caller, "token.rotate", out.first.id,
                  {{"name", out.first.name}, {"old", old_id}, {"grace_ms", grace_ms}});
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

std::vector<TokenInfo> Core::ListUserTokens(const std::string& user_id) const {
  ReaderLock lock(state_mu_);
  return tokens_.List("user", user_id.empty() ? nullptr : &user_id, clock_->NowMs());
}

Status Core::RevokeUserToken(const Caller& by, const std::string& id) {
  return Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    // A user's token, or a console session (a login link's has no token
    // to revoke it by).
    const store::TokenRow* row = tokens_.FindId("user", id);
    if (row == nullptr) row = tokens_.FindId("session", id);
    if (row == nullptr) return Status::NotFound("no user token " + id + " (tide admin token ls)");
    TokenInfo revoked = tokens_.Info(*row);
    tokens_.Revoke(row->hash, batch);
    EndSessionsOf(revoked.id, batch, 0);
    audit_.Record(batch, clock_->NowMs(), by, "token.revoke", revoked.id,
                  {{"user", revoked.subject}, {"name", revoked.name}});
    return Status::Ok();
  });
}

std::vector<AuditEntry> Core::AuditLog(int64_t since, size_t limit) const {
  ReaderLock lock(state_mu_);
  return audit_.List(since, limit);
}

// ------------------------------------------------------------------ jobs

Result<std::pair<Job, bool>> Core::SubmitJob(const Caller& caller, api::JobSpec spec,
                                             const std::string& idempotency_key) {
  if (!spec.code.empty() && code_checker_ && !code_checker_(caller.subject, spec.code)) {
    return NoCode("code");
  }
  Job out;
  bool created = false;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    if (std::string earlier; Replayed(caller, idempotency_key, &earlier)) {
      const JobEntry* e = jobs_.Find(earlier);
      if (e == nullptr) return Status::Conflict("Idempotency-Key was used for batch " + earlier);
      out = e->job;
      return Status::Ok();
    }
    for (size_t i = 0; i < spec.depends_on.size(); ++i) {
      const std::string& dep = spec.depends_on[i].job;
      const JobEntry* j = jobs_.Find(dep);
      if ((j != nullptr && Visible(caller, j->job)) || MayUseBatch(caller, dep)) continue;
      return Status::InvalidArgument("no job or batch " + dep,
                                     "depends_on[" + std::to_string(i) + "].job");
    }
    Job job;
    do {
      job.id = NewId("j-");
    } while (jobs_.Has(job.id));
    job.owner = caller.subject;
    job.spec = std::move(spec);
    job.status = JobStatus::kQueued;
    job.created_at = clock_->NowMs();
    job.pending_reason = "waiting for the scheduler";
    // Admission: the job's worst case moves into escrow now, or it is not
    // accepted at all.
    const api::JobSpec& s = job.spec;
    const Micros rate = accounts_.MaxRate(s, jobs_);
    const Micros hold = accounts_.WorstCase(s, rate);
    std::string because =
        s.max_cost > 0 && (s.max_runtime_s == 0 || hold == s.max_cost) ? "its max_cost"
        : s.max_runtime_s > 0
            ? std::to_string(s.resources.gpu_count * s.resources.nodes) + " GPUs at up to " +
                  ledger::FormatCredits(rate) + " credits per GPU-hour for max_runtime " +
                  std::to_string(s.max_runtime_s) + "s + grace " + std::to_string(s.grace_s) + "s"
            : "the default cap for jobs without max_runtime or max_cost";
    TIDE_RETURN_IF_ERROR(accounts_.Admit(caller.subject, job.id, hold, "the job", because,
                                         "lower max_runtime or max_cost"));
    out.id = jobs_.Add(std::move(job)).job.id;
    Remember(caller, idempotency_key, out.id, batch);
    // The scheduler runs in this same batch, before the write: the answer
    // already says whether the job was placed or why it waits.
    created = true;
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (created) {
    ReaderLock lock(state_mu_);
    out = jobs_.At(out.id).job;
  }
  return std::make_pair(out, created);
}

Result<Job> Core::CancelJob(const Caller& caller, const std::string& id) {
  Job out;
  Status st = Run([&](store::WriteBatch&) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    JobEntry* e = jobs_.Find(id);
    if (e == nullptr || !Visible(caller, e->job)) return Status::NotFound("no job " + id);
    if (!api::IsTerminal(e->job.status) && !e->job.cancel_requested) {
      if (e->job.status == api::JobStatus::kQueued) ++quiet_changes_;  // it held nothing
      jobs_.Cancel(*e, "cancelled");
    }
    out = e->job;
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

Result<Job> Core::DeleteJob(const Caller& caller, const std::string& id) {
  Job out;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    JobEntry* e = jobs_.Find(id);
    if (e == nullptr || !Visible(caller, e->job)) return Status::NotFound("no job " + id);
    if (!api::IsTerminal(e->job.status)) {
      return Status::Conflict("job " + id + " is " + api::JobStatusName(e->job.status) +
                              ": cancel it first (tide cancel " + id + "), then delete it");
    }
    if (e->job.deleted_at == 0) {
      Delete({id}, caller, batch);
      ++quiet_changes_;  // an ended job's record, cut: the scheduler sees nothing new
    }
    out = e->job;
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

void Core::Delete(const std::vector<std::string>& ids, const Caller& by, store::WriteBatch& batch) {
  const int64_t now = clock_->NowMs();
  std::vector<JobEntry*> entries;
  for (const std::string& id : ids) entries.push_back(&jobs_.At(id));
  // A code archive goes with the last job of its owner that uses it.
  std::set<std::pair<std::string, std::string>> gone;
  for (JobEntry* e : entries) {
    if (!e->job.spec.code.empty()) gone.insert({e->job.owner, e->job.spec.code});
  }
  for (JobEntry* e : entries) jobs_.Delete(*e, now);
  if (!gone.empty()) {
    for (const auto& [jid, e] : jobs_.jobs()) {
      if (!e.job.spec.code.empty()) gone.erase({e.job.owner, e.job.spec.code});
    }
  }
  for (JobEntry* e : entries) {
    DeletedBlobs d{e->job.id, e->job.owner, ""};
    audit_.Record(batch, now, by, "job.delete", e->job.id,
                  {{"owner", e->job.owner}, {"status", api::JobStatusName(e->job.status)}});
    deleted_.push_back(std::move(d));
  }
  for (const auto& [owner, code] : gone) deleted_.push_back({"", owner, code});
}

std::vector<std::string> Core::PastRetention(int64_t now, size_t max) const {
  std::vector<std::string> out;
  if (options_.retention_ms <= 0) return out;
  for (const std::string& id : jobs_.order()) {
    if (out.size() == max) break;
    const Job& job = jobs_.At(id).job;
    const int64_t ended = job.finished_at > 0 ? job.finished_at : job.created_at;
    if (job.deleted_at == 0 && api::IsTerminal(job.status) && ended + options_.retention_ms <= now) {
      out.push_back(id);
    }
  }
  return out;
}

std::vector<DeletedBlobs> Core::DeletedJobs() const {
  ReaderLock lock(state_mu_);
  std::vector<DeletedBlobs> out;
  for (const std::string& id : jobs_.order()) {
    const Job& job = jobs_.At(id).job;
    if (job.deleted_at > 0) out.push_back({job.id, job.owner, ""});
  }
  return out;
}

Result<Job> Core::GetJob(const Caller& caller, const std::string& id) const {
  ReaderLock lock(state_mu_);
  const JobEntry* e = jobs_.Find(id);
  if (e == nullptr || !Visible(caller, e->job)) return Status::NotFound("no job " + id);
  Job job = e->job;
  if (job.status == JobStatus::kQueued) {
    std::lock_guard<std::mutex> elock(estimate_mu_);
    auto it = estimates_.find(id);
    if (it != estimates_.end()) job.expected_start = it->second;
  }
  return job;
}

Result<api::JobTelemetry> Core::JobTelemetry(const Caller& caller, const std::string& id,
                                             bool series) const {
  ReaderLock lock(state_mu_);
  const JobEntry* e = jobs_.Find(id);
  if (e == nullptr || !Visible(caller, e->job)) return Status::NotFound("no job " + id);
  return telemetry_.View(e->job, jobs_, clock_->NowMs(), series);
}

Result<api::NodeTelemetry> Core::NodeTelemetry(const Caller& caller,
                                               const std::string& id_or_name, bool series) const {
  ReaderLock lock(state_mu_);
  for (const auto& [id, n] : jobs_.nodes()) {
    if (id != id_or_name && n.node.name != id_or_name) continue;
    if (caller.scope != Scope::kAdmin && n.node.owner != caller.subject) continue;
    return telemetry_.NodeView(n.node, clock_->NowMs(), series);
  }
  return Status::NotFound("no node " + id_or_name);
}

namespace {

bool ContainsFolded(const std::string& hay, const std::string& lowered_needle) {
  auto it = std::search(hay.begin(), hay.end(), lowered_needle.begin(), lowered_needle.end(),
                        [](char a, char b) {
                          return std::tolower(static_cast<unsigned char>(a)) == b;
                        });
  return it != hay.end();
}

}  // namespace

JobPage Core::ListJobs(const Caller& caller, const JobQuery& q) const {
  std::string text = q.text;
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  ReaderLock lock(state_mu_);
  auto runs_on = [&](const Job& job, const std::string& model) {
    state_mu_.AssertReaderHeld();  // the lambdas run here, under the lock
    const api::Attempt* a = CurrentAttempt(job);
    if (a == nullptr && !job.attempts.empty()) a = &job.attempts.back();
    if (a == nullptr) return false;
    const NodeEntry* n = jobs_.FindNode(a->node_id);
    if (n == nullptr) return false;
    for (int g : a->gpus) {
      if (g >= 0 && g < static_cast<int>(n->node.gpus.size()) && n->node.gpus[g].model == model) {
        return true;
      }
    }
    return false;
  };
  auto matches = [&](const Job& job) {
    state_mu_.AssertReaderHeld();
    if (!Visible(caller, job)) return false;
    if (!q.batches.empty() && !q.batches.count(job.batch)) return false;
    if (!q.statuses.empty() && !q.statuses.count(api::JobStatusName(job.status))) return false;
    if (!q.tags.empty() && std::none_of(job.spec.tags.begin(), job.spec.tags.end(),
                                        [&](const std::string& t) { return q.tags.count(t) > 0; })) {
      return false;
    }
    if (!q.gpu_types.empty()) {
      const auto& asked = job.spec.resources.gpu_types;
      bool any = false;
      for (const std::string& t : q.gpu_types) {
        any = any || (t == "any" ? asked.empty()
                                 : std::find(asked.begin(), asked.end(), t) != asked.end() ||
                                       runs_on(job, t));
      }
      if (!any) return false;
    }
    if (!text.empty() && !ContainsFolded(job.id, text) && !ContainsFolded(job.spec.name, text)) {
      return false;
    }
    return true;
  };
  JobPage page;
  bool started = q.after.empty();
  const auto& order = jobs_.order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (!started) {
      started = *it == q.after;
      continue;
    }
    const Job& job = jobs_.At(*it).job;
    if (!matches(job)) continue;
    if (page.jobs.size() == q.limit) {
      if (page.next.empty()) page.next = page.jobs.back().id;
      if (!q.count) break;
      ++page.total;
      continue;
    }
    page.jobs.push_back(job);
    ++page.total;
  }
  if (q.count && !q.after.empty()) {
    // The matches before the cursor count too.
    for (auto it = order.rbegin(); it != order.rend() && *it != q.after; ++it) {
      if (matches(jobs_.At(*it).job)) ++page.total;
    }
    if (const JobEntry* e = jobs_.Find(q.after); e != nullptr && matches(e->job)) ++page.total;
  }
  return page;
}

std::vector<Job> Core::JobChangesSince(const Caller& caller, uint64_t seq, uint64_t* next) const {
  ReaderLock lock(state_mu_);
  std::vector<Job> out;
  for (const std::string& id : jobs_.ChangedSince(seq, 1000, next)) {
    const Job& job = jobs_.At(id).job;
    if (Visible(caller, job)) out.push_back(job);
  }
  return out;
}

uint64_t Core::JobChangeSeq() const {
  ReaderLock lock(state_mu_);
  return jobs_.change_seq();
}

std::pair<std::vector<Job>, std::string> Core::ListJobs(const Caller& caller,
                                                        const std::string& status,
                                                        const std::string& tag, size_t limit,
                                                        const std::string& after,
                                                        const std::string& batch) const {
  JobQuery q;
  if (!status.empty()) q.statuses = {status};
  if (!tag.empty()) q.tags = {tag};
  if (!batch.empty()) q.batches = {batch};
  q.limit = limit;
  q.after = after;
  JobPage page = ListJobs(caller, q);
  return {std::move(page.jobs), std::move(page.next)};
}

// ------------------------------------------------------------------ batches

Result<std::pair<BatchInfo, bool>> Core::SubmitBatch(const Caller& caller, const api::BatchSpec& spec,
                                                     const std::string& idempotency_key) {
  if (caller.scope != Scope::kUser && caller.scope != Scope::kAdmin) {
    return Status::PermissionDenied("only users submit batches");
  }
  // Build every trial's spec before taking the core: a bad trial refuses
  // the whole file and nothing is created.
  std::vector<api::JobSpec> specs;
  specs.reserve(spec.trials.size());
  for (const auto& t : spec.trials) {
    auto s = api::TrialJobSpec(spec, t);
    if (!s.ok()) return s.status();
    if (!s->code.empty() && code_checker_ && !code_checker_(caller.subject, s->code)) {
      return NoCode("template.code");
    }
    specs.push_back(std::move(s).value());
  }
  std::string id;
  bool created = false;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    if (Replayed(caller, idempotency_key, &id)) {
      if (!batches_.Has(id)) return Status::Conflict("Idempotency-Key was used for job " + id);
      return Status::Ok();
    }
    auto made = batches_.Submit(caller.subject, spec, std::move(specs), batch);
    if (!made.ok()) return made.status();
    id = *made;
    Remember(caller, idempotency_key, id, batch);
    created = true;
    return Status::Ok();
  });
  if (!st.ok()) return st;
  ReaderLock lock(state_mu_);
  return std::make_pair(batches_.Info(id), created);
}

Result<BatchInfo> Core::CancelBatch(const Caller& caller, const std::string& id) {
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    if (!MayUseBatch(caller, id)) return Status::NotFound("no batch " + id);
    batches_.Cancel(id, batch);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  ReaderLock lock(state_mu_);
  return batches_.Info(id);
}

Result<BatchInfo> Core::GetBatch(const Caller& caller, const std::string& id) const {
  ReaderLock lock(state_mu_);
  if (!MayUseBatch(caller, id)) return Status::NotFound("no batch " + id);
  return batches_.Info(id);
}

std::vector<BatchInfo> Core::ListBatches(const Caller& caller) const {
  ReaderLock lock(state_mu_);
  return batches_.List(caller.scope == Scope::kAdmin ? "" : caller.subject);
}

Result<std::vector<Job>> Core::BatchTrials(const Caller& caller, const std::string& id) const {
  ReaderLock lock(state_mu_);
  if (!MayUseBatch(caller, id)) return Status::NotFound("no batch " + id);
  return batches_.Trials(id);
}

// ------------------------------------------------------------------ agents

Result<std::pair<std::string, std::string>> Core::RegisterNode(const Caller& caller,
                                                               const api::RegisterRequest& req) {
  // A node token names the node; a join token names the provider.
  std::string node_id = caller.scope == Scope::kNode ? caller.subject : "";
  std::string token;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    if (caller.scope == Scope::kJoin) {
      node_id = NewId("n-");
      NodeEntry& fresh = jobs_.nodes()[node_id];
      fresh.node.id = node_id;
      fresh.node.owner = caller.subject;
      store::TokenRow row;
      row.kind = "node";
      row.subject = node_id;
      if (options_.node_token_life_ms > 0) {
        row.expires_at = clock_->NowMs() + options_.node_token_life_ms;
      }
      token = tokens_.Issue("tide_n_", row, clock_->NowMs(), batch);
    }
    NodeEntry* n = jobs_.FindNode(node_id);
    if (n == nullptr) return Status::NotFound("node " + node_id + " is unknown");
    reconciler_.Register(*n, req);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return std::make_pair(node_id, token);
}

Result<std::string> Core::RenewNodeToken(const Caller& caller) {
  if (caller.scope != Scope::kNode || options_.node_token_life_ms <= 0) return std::string();
  const int64_t life = options_.node_token_life_ms;
  constexpr int64_t kGraceMs = 5 * 60'000;  // for requests under way with the old token
  {
    // Almost every heartbeat renews nothing: find that out without a command.
    ReaderLock lock(state_mu_);
    if (!tokens_.NodeNeedsRenewal(caller.subject, caller.token_id, clock_->NowMs(), life,
                                  kGraceMs)) {
      return std::string();
    }
  }
  std::string fresh;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    fresh = tokens_.RenewNode(caller.subject, caller.token_id, clock_->NowMs(), life, kGraceMs,
                              batch);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return fresh;
}

Result<api::AgentWork> Core::Heartbeat(const std::string& node_id, const api::Heartbeat& hb) {
  api::AgentWork work;
  Status st = Run([&](store::WriteBatch&) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    return reconciler_.Heartbeat(node_id, hb, work);
  });
  if (!st.ok()) return st;
  return work;
}

Result<api::AgentWork> Core::PollWork(const std::string& node_id, int64_t wait_ms) {
  const int64_t deadline = clock_->MonotonicMs() + wait_ms;
  while (true) {
    const uint64_t seen = epoch();
    api::AgentWork work;
    {
      ReaderLock lock(state_mu_);
      const NodeEntry* n = jobs_.FindNode(node_id);
      if (n == nullptr) return Status::NotFound("node " + node_id + " is unknown");
      delivery_.Collect(jobs_, *n, work);
    }
    if (!work.assignments.empty() || !work.cancels.empty()) return work;
    if (clock_->MonotonicMs() >= deadline) return work;
    WaitChange(seen, deadline);
  }
}

Status Core::JobEvent(const std::string& node_id, const std::string& job_id,
                      const api::JobEvent& ev) {
  return Run([&](store::WriteBatch&) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    return reconciler_.JobEvent(node_id, job_id, ev);
  });
}

Result<int> Core::CheckAgentJob(const std::string& node_id, const std::string& job_id,
                                int attempt, bool current_only) const {
  ReaderLock lock(state_mu_);
  // A deleted job takes no more bytes, not even a stale attempt's log.
  const JobEntry* e = jobs_.Find(job_id);
  if (e != nullptr && e->job.deleted_at > 0) return Status::NotFound("job " + job_id + " was deleted");
  return reconciler_.AgentRank(node_id, job_id, attempt, current_only);
}

Status Core::RecordCheckpoint(const std::string& node_id, const std::string& job_id, int attempt,
                              int64_t bytes, const std::function<Status()>& commit) {
  return Run([&](store::WriteBatch&) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    return reconciler_.Checkpoint(node_id, job_id, attempt, bytes, commit);
  });
}

Result<api::Node> Core::SetDraining(const Caller& by, const std::string& id_or_name, bool draining,
                                    bool evict) {
  api::Node out;
  Status st = Run([&](store::WriteBatch& batch) {
    state_mu_.AssertHeld();  // Run applies every command under the state lock
    auto node = reconciler_.Drain(id_or_name, draining, evict);
    if (!node.ok()) return node.status();
    out = *node;
    audit_.Record(batch, clock_->NowMs(), by, draining ? "node.drain" : "node.undrain", node->id,
                  {{"name", node->name}, {"evict", evict}});
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

std::vector<NodeStatus> Core::ListNodes() const {
  ReaderLock lock(state_mu_);
  std::vector<NodeStatus> out;
  for (const auto& [id, n] : jobs_.nodes()) out.push_back({n.node, n.leases, Reliability(n.history)});
  return out;
}

SchedulerInput Core::SchedulerSnapshot() const {
  ReaderLock lock(state_mu_);
  return planner_.Snapshot(clock_->NowMs());
}

QueueSummary Core::Queue(const Caller& caller) const {
  QueueSummary out;
  std::map<std::string, QueueGroup> groups;
  auto type_of = [](const api::JobSpec& spec) {
    std::string t;
    for (const auto& g : spec.resources.gpu_types) t += (t.empty() ? "" : "|") + g;
    return t.empty() ? std::string("any") : t;
  };
  std::map<std::string, std::vector<int64_t>> waits;
  std::set<std::string> counted;  // running jobs already counted
  ReaderLock lock(state_mu_);
  std::lock_guard<std::mutex> elock(estimate_mu_);
  out.estimated_at = estimated_at_;
  for (const auto& [id, n] : jobs_.nodes()) {
    if (n.node.state != api::NodeState::kReady) continue;
    out.total_gpus += static_cast<int>(n.node.gpus.size());
    int used = 0;
    for (const auto& [job_id, gpus] : n.leases) used += static_cast<int>(gpus.size());
    if (!n.node.draining) out.free_gpus += static_cast<int>(n.node.gpus.size()) - used;
    for (const auto& [job_id, gpus] : n.leases) {
      const Job& job = jobs_.At(job_id).job;
      QueueGroup& g = groups[type_of(job.spec)];
      if (counted.insert(job_id).second) ++g.running_jobs;  // a gang counts once
      g.running_gpus += static_cast<int>(gpus.size());
    }
  }
  const int64_t now = clock_->NowMs();
  for (const auto& [order, id] : jobs_.queued()) {
    const Job& job = jobs_.At(id).job;
    std::string type = type_of(job.spec);
    QueueGroup& g = groups[type];
    ++g.pending_jobs;
    int gpus = job.spec.resources.gpu_count * job.spec.resources.nodes;
    g.pending_gpus += gpus;
    auto e = estimates_.find(id);
    int64_t start = e == estimates_.end() ? 0 : e->second;
    if (start > 0) waits[type].push_back(std::max<int64_t>(0, start - now));
    if (Visible(caller, job)) out.jobs.push_back({id, job.spec.name, type, gpus, job.pending_reason, start});
  }
  for (auto& [type, g] : groups) {
    g.gpu_type = type;
    auto& w = waits[type];
    if (!w.empty()) {
      std::sort(w.begin(), w.end());
      g.expected_wait_ms = w[w.size() / 2];
    }
    out.groups.push_back(g);
  }
  return out;
}

UserStandings Core::Users() const {
  UserStandings out;
  ReaderLock lock(state_mu_);
  out.at = clock_->NowMs();
  out.half_life_ms = planner_.fair().half_life_ms();
  const auto shares = planner_.fair().Shares(out.at);
  std::map<std::string, UserStanding> by_id;
  for (const auto& [id, info] : users_) {
    UserStanding& u = by_id[id];
    u.user = info;
    u.weight = planner_.Weight(id);
    auto s = shares.find(id);
    if (s != shares.end()) u.usage_gpu_s = s->second.usage_gpu_s;
    BalanceInfo b = accounts_.Balance(id);
    u.available = b.available;
    u.escrow = b.escrow;
    u.daily_cap = accounts_.DailyCap(id);
  }
  std::set<std::string> counted;  // a gang's job counts once
  for (const auto& [node_id, n] : jobs_.nodes()) {
    for (const auto& [job_id, gpus] : n.leases) {
      auto u = by_id.find(jobs_.At(job_id).job.owner);
      if (u == by_id.end()) continue;
      if (counted.insert(job_id).second) ++u->second.running_jobs;
      u->second.running_gpus += static_cast<int>(gpus.size());
    }
  }
  for (const auto& [order, id] : jobs_.queued()) {
    if (batches_.Held(id)) continue;  // a trial its batch holds back: not the scheduler's yet
    const Job& job = jobs_.At(id).job;
    auto u = by_id.find(job.owner);
    if (u == by_id.end()) continue;
    ++u->second.queued_jobs;
    u->second.queued_gpus += job.spec.resources.gpu_count * job.spec.resources.nodes;
  }
  double active_weight = 0, usage = 0;
  for (const auto& [id, u] : by_id) {
    if (u.running_jobs + u.queued_jobs > 0) active_weight += u.weight;
    usage += u.usage_gpu_s;
  }
  std::vector<UserStanding*> waiting;
  for (auto& [id, u] : by_id) {
    u.score = sched::FairShareScore(u.usage_gpu_s, u.running_gpus, u.weight);
    if (u.running_jobs + u.queued_jobs > 0 && active_weight > 0) u.share = u.weight / active_weight;
    if (usage > 0) u.usage_share = u.usage_gpu_s / usage;
    if (u.queued_jobs > 0) waiting.push_back(&u);
  }
  std::stable_sort(waiting.begin(), waiting.end(),
                   [](const UserStanding* a, const UserStanding* b) { return a->score < b->score; });
  for (size_t i = 0; i < waiting.size(); ++i) waiting[i]->rank = static_cast<int>(i) + 1;
  for (auto& [id, u] : by_id) out.users.push_back(std::move(u));
  std::sort(out.users.begin(), out.users.end(),
            [](const UserStanding& a, const UserStanding& b) { return a.user.name < b.user.name; });
  return out;
}

}  // namespace tide::server
