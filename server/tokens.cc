#include "server/tokens.h"

#include <algorithm>

#include "common/token.h"

namespace tide::server {
namespace {

// Last use reaches the store when it moved this much since stored.
constexpr int64_t kUseFlushMs = 60'000;

}  // namespace

std::string Tokens::IdOf(const store::TokenRow& row) {
  return std::string(1, row.kind.empty() ? 't' : row.kind[0]) + "t-" + row.hash.substr(0, 12);
}

Result<Access> ParseAccess(const std::string& scope, const std::string& field) {
  if (scope.empty() || scope == "full") return Access::kFull;
  if (scope == "read") return Access::kRead;
  if (scope == "submit") return Access::kSubmit;
  return Status::InvalidArgument(
      "scope \"" + scope +
          "\" is not one of read (look only), submit (read, and submit and cancel jobs and "
          "batches) or full (everything the user may)",
      field);
}

const char* AccessName(Access a) {
  switch (a) {
    case Access::kRead: return "read";
    case Access::kSubmit: return "submit";
    case Access::kFull: return "full";
  }
  return "full";
}

void Tokens::Load(const std::vector<store::TokenRow>& rows) {
  rows_.clear();
  for (const auto& row : rows) rows_[row.hash] = row;
}

Result<const store::TokenRow*> Tokens::Check(const std::string& hash, int64_t now) const {
  auto it = rows_.find(hash);
  if (it == rows_.end() || !ConstantTimeEquals(it->second.hash, hash)) {
    return Status::Unauthenticated("invalid token");
  }
  const store::TokenRow& row = it->second;
  if (row.expires_at != 0 && now >= row.expires_at) {
    return Status::Unauthenticated("token " + IdOf(row) + " has expired");
  }
  return &row;
}

void Tokens::Used(const std::string& hash, int64_t now) const {
  std::lock_guard<std::mutex> lock(used_mu_);
  int64_t& at = used_[hash];
  at = std::max(at, now);
}

std::string Tokens::Issue(const std::string& prefix, store::TokenRow row, int64_t now,
                          store::WriteBatch& batch) {
  std::string secret = NewToken(prefix);
  row.hash = Sha256Hex(secret);
  row.created_at = now;
  row.last_used_at = 0;
  rows_[row.hash] = row;
  batch.tokens.push_back(row);
  return secret;
}

bool Tokens::Any(const std::string& kind) const {
  return std::any_of(rows_.begin(), rows_.end(),
                     [&](const auto& entry) { return entry.second.kind == kind; });
}

TokenInfo Tokens::Info(const store::TokenRow& row) const {
  TokenInfo info{IdOf(row), row.kind, row.subject, row.name, "", row.created_at,
                 row.expires_at, row.last_used_at};
  if (info.name.empty() && row.kind == "user") info.name = "main";
  if (row.kind == "user") {
    auto access = ParseAccess(row.scope, "scope");
    info.scope = AccessName(access.ok() ? *access : Access::kRead);
  }
  if (row.kind == "session") info.scope = row.scope.empty() ? "full" : row.scope;
  std::lock_guard<std::mutex> lock(used_mu_);
  if (auto it = used_.find(row.hash); it != used_.end()) {
    info.last_used_at = std::max(info.last_used_at, it->second);
  }
  return info;
}

std::vector<TokenInfo> Tokens::List(const std::string& kind, const std::string* subject,
                                    int64_t now) const {
  std::vector<TokenInfo> out;
  for (const auto& [hash, row] : rows_) {
    if (row.kind != kind || (subject != nullptr && row.subject != *subject)) continue;
    if (row.expires_at != 0 && now >= row.expires_at) continue;  // expired: no longer a token
    out.push_back(Info(row));
  }
  std::sort(out.begin(), out.end(), [](const TokenInfo& a, const TokenInfo& b) {
    return a.created_at != b.created_at ? a.created_at < b.created_at : a.id < b.id;
  });
  return out;
}

const store::TokenRow* Tokens::Find(const std::string& kind, const std::string* subject,
                                    const std::string& name_or_id) const {
  if (name_or_id.empty()) return nullptr;
  for (const auto& [hash, row] : rows_) {
    if (row.kind != kind || (subject != nullptr && row.subject != *subject)) continue;
    const std::string name = row.name.empty() && kind == "user" ? "main" : row.name;
    if (name == name_or_id || IdOf(row) == name_or_id) return &row;
  }
  return nullptr;
}

const store::TokenRow* Tokens::FindId(const std::string& kind, const std::string& id) const {
  for (const auto& [hash, row] : rows_) {
    if (row.kind == kind && IdOf(row) == id) return &row;
  }
  return nullptr;
}

void Tokens::Revoke(std::string hash, store::WriteBatch& batch) {
  // By value: callers pass a row's own hash, which the erase frees.
  rows_.erase(hash);
  {
    std::lock_guard<std::mutex> lock(used_mu_);
    used_.erase(hash);
  }
  batch.delete_tokens.push_back(hash);
}

bool Tokens::NodeNeedsRenewal(const std::string& node_id, const std::string& used_id, int64_t now,
                              int64_t life_ms, int64_t grace_ms) const {
  const store::TokenRow* used = FindId("node", used_id);
  if (used == nullptr || used->subject != node_id) return false;
  for (const auto& [hash, row] : rows_) {
    if (row.kind != "node" || row.subject != node_id || hash == used->hash) continue;
    if (row.created_at > used->created_at) return true;  // a renewal it did not take up
    if (row.expires_at == 0 || row.expires_at > now + grace_ms) return true;  // to end soon
  }
  return used->expires_at == 0 || used->expires_at - now < life_ms / 3;
}

std::string Tokens::RenewNode(const std::string& node_id, const std::string& used_id, int64_t now,
                              int64_t life_ms, int64_t grace_ms, store::WriteBatch& batch) {
  const store::TokenRow* used = FindId("node", used_id);
  if (used == nullptr || used->subject != node_id) return "";
  const std::string used_hash = used->hash;
  const int64_t used_created = used->created_at;
  std::vector<std::string> newer, older;
  for (const auto& [hash, row] : rows_) {
    if (row.kind != "node" || row.subject != node_id || hash == used_hash) continue;
    (row.created_at > used_created ? newer : older).push_back(hash);
  }
  for (const auto& hash : newer) Revoke(hash, batch);  // never used: the agent is on `used`
  for (const auto& hash : older) ExpireAt(hash, now + grace_ms, batch);
  const store::TokenRow& current = rows_.at(used_hash);
  if (current.expires_at != 0 && current.expires_at - now >= life_ms / 3) return "";
  store::TokenRow row;
  row.kind = "node";
  row.subject = node_id;
  row.expires_at = now + life_ms;
  // `used` keeps its own end until the agent calls with the new one.
  return Issue("tide_n_", row, now, batch);
}

int Tokens::RevokeAll(const std::string& kind, const std::string& subject,
                      store::WriteBatch& batch) {
  std::vector<std::string> hashes;
  for (const auto& [hash, row] : rows_) {
    if (row.kind == kind && row.subject == subject) hashes.push_back(hash);
  }
  for (const auto& hash : hashes) Revoke(hash, batch);
  return static_cast<int>(hashes.size());
}

std::vector<std::string> Tokens::HashesWhere(
    const std::function<bool(const store::TokenRow&)>& pred) const {
  std::vector<std::string> hashes;
  for (const auto& [hash, row] : rows_) {
    if (pred(row)) hashes.push_back(hash);
  }
  return hashes;
}

void Tokens::Rename(const std::string& hash, const std::string& name, store::WriteBatch& batch) {
  auto it = rows_.find(hash);
  if (it == rows_.end()) return;
  it->second.name = name;
  batch.tokens.push_back(it->second);
}

void Tokens::ExpireAt(const std::string& hash, int64_t at, store::WriteBatch& batch) {
  auto it = rows_.find(hash);
  if (it == rows_.end()) return;
  store::TokenRow& row = it->second;
  if (row.expires_at != 0 && row.expires_at <= at) return;
  row.expires_at = at;
  batch.tokens.push_back(row);
}

void Tokens::FlushUsed(store::WriteBatch& batch) {
  std::unordered_map<std::string, int64_t> used;
  {
    std::lock_guard<std::mutex> lock(used_mu_);
    used = used_;
  }
  for (const auto& [hash, at] : used) {
    auto it = rows_.find(hash);
    if (it == rows_.end()) continue;
    if (at - it->second.last_used_at < kUseFlushMs) continue;
    it->second.last_used_at = at;
    batch.tokens.push_back(it->second);
  }
}

}  // namespace tide::server
