// Store: durable state of the server, behind one small interface.
//
// The server core is the only writer. It keeps the authoritative state in
// memory and hands the store one WriteBatch per group commit: all rows of a
// batch are written in one transaction, or none are. At start the server
// reads everything back with LoadAll(). The store knows rows, not job
// semantics: job and node documents are opaque JSON text.
//
// Implementations: MemoryStore (tests), SqliteStore (default, WAL mode).
// Thread safety: Write and LoadAll may be called from any one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tide::store {

struct JobRow {
  std::string id;
  std::string owner;   // user id
  std::string status;  // queued, running, ... (for queries; the doc is the truth)
  int64_t created_at = 0;
  std::string doc;     // JSON of api::Job
};

struct NodeRow {
  std::string id;
  std::string name;
  std::string doc;  // JSON of api::Node
};

struct UserRow {
  std::string id;
  std::string name;  // unique
  int64_t created_at = 0;
};

// Only the SHA-256 of a token is stored.
struct TokenRow {
  std::string hash;     // hex SHA-256 of the secret; primary key
  std::string kind;     // "admin", "user", "join", "node"
  std::string subject;  // user id, node id, or "" for admin and join tokens
  int64_t created_at = 0;
  // What its owner calls it: unique among a user's tokens; "" for the
  // token a user was created with (shown as "main").
  std::string name;
  std::string scope;        // user tokens: "read", "submit", "" = everything the user may
  int64_t expires_at = 0;   // unix ms; 0 = never
  int64_t last_used_at = 0; // unix ms, stored within a minute or so; 0 = never used
};

// A client's Idempotency-Key and the job it created.
struct IdempotencyRow {
  std::string owner;
  std::string key;
  std::string job_id;
};

// One applied ledger transaction; rows are only ever added, never replaced.
struct LedgerRow {
  int64_t seq = 0;  // primary key: 1, 2, ... without gaps
  int64_t at = 0;
  std::string kind;
  std::string job_id;  // "" when not about a job
  std::string doc;     // JSON of ledger::Transaction
};

// A compute card, by the SHA-256 of its code.
struct CardRow {
  std::string hash;
  std::string doc;  // JSON: value, expires_at, created_at, redeemed_by, redeemed_at
};

// A batch of trials (the trials themselves are job rows naming it).
struct BatchRow {
  std::string id;
  std::string owner;
  int64_t created_at = 0;
  std::string doc;  // JSON of api::Batch
};

// One entry of the audit log: an admin, money or token action, who took it
// and from where. Rows are only ever added, never replaced or deleted.
struct AuditRow {
  int64_t seq = 0;      // primary key: 1, 2, ... without gaps
  int64_t at = 0;       // unix ms
  std::string actor;    // user id, "admin", or "server" for the server's own actions
  std::string token;    // the id of the token that called ("ut-…"); "" if none
  std::string address;  // the caller's IP address; "" if not over the network
  std::string action;   // "user.create", "token.revoke", "card.redeem", ...
  std::string target;   // what it acted on: a user, token, node, job id; may be ""
  std::string detail;   // JSON object: the action's parameters, never a secret
};

// The values of a job's secrets, kept apart from its record (which names
// them) and deleted when the job ends.
struct SecretRow {
  std::string job_id;  // primary key
  std::string doc;     // JSON object: name -> value
};

// Server settings (the price list, ...), by name.
struct SettingRow {
  std::string key;
  std::string value;
};

// Rows to insert or replace (by primary key) in one transaction.
struct WriteBatch {
  std::vector<JobRow> jobs;
  std::vector<NodeRow> nodes;
  std::vector<UserRow> users;
  std::vector<TokenRow> tokens;
  std::vector<std::string> delete_tokens;  // hashes; applied after `tokens`
  std::vector<IdempotencyRow> idempotency;
  std::vector<LedgerRow> ledger;  // inserted; a seq already stored fails the batch
  std::vector<CardRow> cards;
  std::vector<SettingRow> settings;
  std::vector<BatchRow> batches;
  std::vector<AuditRow> audit;  // inserted; a seq already stored fails the batch
  std::vector<SecretRow> secrets;
  std::vector<std::string> delete_secrets;  // job ids; applied after `secrets`

  bool empty() const;
  // Moves all rows of `other` to the end of this batch. A later row for the
  // same key wins when the batch is written.
  void Append(WriteBatch&& other);
};

struct Contents {
  std::vector<JobRow> jobs;  // ordered by created_at, then id
  std::vector<NodeRow> nodes;
  std::vector<UserRow> users;
  std::vector<TokenRow> tokens;
  std::vector<IdempotencyRow> idempotency;
  std::vector<LedgerRow> ledger;  // ordered by seq
  std::vector<CardRow> cards;
  std::vector<SettingRow> settings;
  std::vector<BatchRow> batches;  // ordered by created_at, then id
  std::vector<AuditRow> audit;    // ordered by seq
  std::vector<SecretRow> secrets;  // ordered by job id
};

class Store {
 public:
  virtual ~Store() = default;

  // Writes every row of `batch` in one transaction and makes it durable
  // (fsync'ed) before returning Ok. On error nothing of the batch is kept.
  virtual Status Write(const WriteBatch& batch) = 0;

  // Everything stored.
  virtual Result<Contents> LoadAll() = 0;

  // Number of the newest schema migration applied.
  virtual int SchemaVersion() const = 0;
};

std::unique_ptr<Store> NewMemoryStore();

// Opens (creating if missing) a SQLite database at `path`, in WAL mode with
// synchronous=FULL, and applies pending numbered migrations.
Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path);

}  // namespace tide::store
