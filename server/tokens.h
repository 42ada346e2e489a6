// Tokens: the room of every bearer credential the server knows — admin,
// user, join and node tokens — by the SHA-256 of its secret (the secret
// itself is never kept, logged or returned after it is made).
//
// A console session is a token too (kind "session", its secret in a
// cookie): its name is the id of the token it was made from, its scope that
// token's ("admin" for the operator's), and it ends with that token. A
// one-time login link's code is kind "login".
//
// A user has the token it was created with (its "main" token) and any it
// makes: each has a name unique among the user's tokens, a scope (read,
// submit, or everything the user may), and may expire. Revoking deletes
// the row, so the next request with it is a 401. Rotating makes a new
// token in the old one's name and lets the old one live for a grace period.
//
// Last use is remembered without the state lock being held exclusively
// (requests authenticate under the shared lock) and reaches the store at
// most about once a minute per token (FlushUsed, from the core's tick).
//
// Thread safety: like every room, guarded by the core's state lock; Used()
// may be called under the shared lock.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "store/store.h"

namespace tide::server {

// What a user token may do.
enum class Access : uint8_t { kRead, kSubmit, kFull };

// "read", "submit", "" (full). Errors name `field`.
Result<Access> ParseAccess(const std::string& scope, const std::string& field);
const char* AccessName(Access a);  // "read", "submit", "full"

// A token as its owner sees it: never the secret.
struct TokenInfo {
  std::string id;  // "ut-3f9a0c1d2e4b": names it without revealing it
  std::string kind;
  std::string subject;
  std::string name;  // "main" for a user's first token
  std::string scope;  // "read", "submit", "full"
  int64_t created_at = 0;
  int64_t expires_at = 0;    // 0 = never
  int64_t last_used_at = 0;  // 0 = never
};

class Tokens {
 public:
  void Load(const std::vector<store::TokenRow>& rows);

  // The row of a secret's hash, if it is known and not expired at `now`.
  Result<const store::TokenRow*> Check(const std::string& hash, int64_t now) const;
  // Remembers that the token of `hash` was used at `now`.
  void Used(const std::string& hash, int64_t now) const;

  // Makes a token (prefix + 256 random bits) from `row`'s kind, subject,
  // name, scope and expiry; returns the secret.
  std::string Issue(const std::string& prefix, store::TokenRow row, int64_t now,
                    store::WriteBatch& batch);
  bool Any(const std::string& kind) const;

  // The tokens of one kind and subject ("" subject: all of the kind),
  // oldest first.
  std::vector<TokenInfo> List(const std::string& kind, const std::string* subject,
                              int64_t now) const;
  // One of them by name or id; nullptr if none.
  const store::TokenRow* Find(const std::string& kind, const std::string* subject,
                              const std::string& name_or_id) const;
  // One of a kind by its id only ("ut-…"); nullptr if none.
  const store::TokenRow* FindId(const std::string& kind, const std::string& id) const;

  void Revoke(std::string hash, store::WriteBatch& batch);

  // Whether the node token `used_id` (the one an agent called with) should
  // be renewed at `now`: it has no end, or less than a third of `life_ms`
  // left, or a newer token of the node exists that the agent did not take,
  // or an older one it has moved on from that does not yet end within
  // `grace_ms`.
  bool NodeNeedsRenewal(const std::string& node_id, const std::string& used_id, int64_t now,
                        int64_t life_ms, int64_t grace_ms) const;
  // Renews a node's credential: tokens issued after `used_id` (renewals the
  // agent never took up) are revoked, and older ones (that it has moved on
  // from) end within `grace_ms`, so requests under way finish with them.
  // If `used_id` has no end or less than a third of `life_ms` left, a new
  // token living `life_ms` is issued and its secret returned ("" when
  // nothing was issued); `used_id` keeps its end until the agent calls with
  // the new one.
  std::string RenewNode(const std::string& node_id, const std::string& used_id, int64_t now,
                        int64_t life_ms, int64_t grace_ms, store::WriteBatch& batch);
  // Revokes every token of a subject (a node's, say); returns how many.
  int RevokeAll(const std::string& kind, const std::string& subject, store::WriteBatch& batch);
  // The hashes of every token `pred` picks (the sessions made from one
  // token, those past their end).
  std::vector<std::string> HashesWhere(const std::function<bool(const store::TokenRow&)>& pred) const;
  void Rename(const std::string& hash, const std::string& name, store::WriteBatch& batch);
  // Makes the token expire at `at` (now or later; never extends it).
  void ExpireAt(const std::string& hash, int64_t at, store::WriteBatch& batch);

  // Writes last-use times that moved a minute or more since stored.
  void FlushUsed(store::WriteBatch& batch);

  TokenInfo Info(const store::TokenRow& row) const;
  // "ut-3f9a0c1d2e4b": the kind's letter and 12 hex digits of the hash.
  static std::string IdOf(const store::TokenRow& row);

 private:
  std::unordered_map<std::string, store::TokenRow> rows_;  // by hash
  mutable std::mutex used_mu_;
  mutable std::unordered_map<std::string, int64_t> used_;  // guarded by used_mu_
};

}  // namespace tide::server
