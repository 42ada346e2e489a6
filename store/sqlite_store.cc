// SqliteStore: the default Store, one SQLite database file in WAL mode.
//
// Durability: synchronous=FULL, so COMMIT returns only after the WAL is
// fsync'ed. One Write() is one BEGIN IMMEDIATE ... COMMIT, hence one fsync
// for the whole group commit, however many rows it carries.
//
// Atomicity: any error inside Write() rolls the transaction back before
// returning, so a batch is stored whole or not at all. If even the ROLLBACK
// fails the connection is in an unknown state; the store then refuses every
// later Write() and the server should exit and reopen the database.
//
// Rows are upserts on the primary key (INSERT ... ON CONFLICT(pk) DO UPDATE),
// not INSERT OR REPLACE: OR REPLACE would also resolve a clash on another
// UNIQUE column (users.name) by silently deleting the other row, where we
// want the batch refused.
//
// Thread-safe: one mutex serialises Write() and LoadAll() on the single
// connection (opened with SQLITE_OPEN_NOMUTEX, since we lock ourselves).
#include <sqlite3.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "store/migrations.h"
#include "store/store.h"

namespace tide::store {
namespace {

using internal::ExecSql;
using internal::SqliteStatus;

// How long a statement waits for a lock held by another connection (another
// process on the same file, or a backup tool) before failing with kUnavailable.
constexpr int kBusyTimeoutMs = 5000;

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;

struct StmtDeleter {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

// Resets a cached statement on scope exit, so it keeps no bound text pointing
// into the caller's rows and holds no read lock.
class ResetOnExit {
 public:
  explicit ResetOnExit(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~ResetOnExit() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;

 private:
  sqlite3_stmt* stmt_;
};

int Bind(sqlite3_stmt* stmt, int index, const std::string& value) {
  // SQLITE_STATIC: the statement is reset before `value` can go away.
  return sqlite3_bind_text64(stmt, index, value.data(), value.size(), SQLITE_STATIC, SQLITE_UTF8);
}

int Bind(sqlite3_stmt* stmt, int index, int64_t value) {
  return sqlite3_bind_int64(stmt, index, value);
}

// Binds `values` to ?1, ?2, ... and stops at the first failure.
template <typename... Values>
int BindAll([[maybe_unused]] sqlite3_stmt* stmt, const Values&... values) {
  [[maybe_unused]] int index = 0;
  int rc = SQLITE_OK;
  ((rc = rc == SQLITE_OK ? Bind(stmt, ++index, values) : rc), ...);
  return rc;
}

std::string ColumnText(sqlite3_stmt* stmt, int col) {
  const unsigned char* text = sqlite3_column_text(stmt, col);
  if (text == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<size_t>(sqlite3_column_bytes(stmt, col)));
}

// Every statement the store runs, prepared once at open.
enum StmtId {
  kBegin,
  kBeginRead,
  kCommit,
  kRollback,
  kUpsertJob,
  kUpsertNode,
  kUpsertUser,
  kUpsertToken,
  kDeleteToken,
  kUpsertIdempotency,
  kInsertLedger,
  kUpsertCard,
  kUpsertSetting,
  kUpsertBatch,
  kInsertAudit,
  kUpsertSecret,
  kDeleteSecret,
  kSelectJobs,
  kSelectNodes,
  kSelectUsers,
  kSelectTokens,
  kSelectIdempotency,
  kSelectLedger,
  kSelectCards,
  kSelectSettings,
  kSelectBatches,
  kSelectAudit,
  kSelectSecrets,
  kNumStmts,
};

constexpr const char* kSql[kNumStmts] = {
    // kBegin: IMMEDIATE takes the write lock up front, so the transaction
    // cannot fail half-way for want of a lock another connection holds.
    "BEGIN IMMEDIATE",
    // kBeginRead
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "INSERT INTO jobs(id, owner, status, created_at, doc) VALUES(?1, ?2, ?3, ?4, ?5) "
    "ON CONFLICT(id) DO UPDATE SET owner = excluded.owner, status = excluded.status, "
    "created_at = excluded.created_at, doc = excluded.doc",
    "INSERT INTO nodes(id, name, doc) VALUES(?1, ?2, ?3) "
    "ON CONFLICT(id) DO UPDATE SET name = excluded.name, doc = excluded.doc",
    "INSERT INTO users(id, name, created_at) VALUES(?1, ?2, ?3) "
    "ON CONFLICT(id) DO UPDATE SET name = excluded.name, created_at = excluded.created_at",
    "INSERT INTO tokens(hash, kind, subject, created_at, name, scope, expires_at, last_used_at) "
    "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
    "ON CONFLICT(hash) DO UPDATE SET kind = excluded.kind, subject = excluded.subject, "
    "created_at = excluded.created_at, name = excluded.name, scope = excluded.scope, "
    "expires_at = excluded.expires_at, last_used_at = excluded.last_used_at",
    "DELETE FROM tokens WHERE hash = ?1",
    "INSERT INTO idempotency(owner, key, job_id) VALUES(?1, ?2, ?3) "
    "ON CONFLICT(owner, key) DO UPDATE SET job_id = excluded.job_id",
    "INSERT INTO ledger(seq, at, kind, job_id, doc) VALUES(?1, ?2, ?3, ?4, ?5)",
    "INSERT INTO cards(hash, doc) VALUES(?1, ?2) ON CONFLICT(hash) DO UPDATE SET doc = excluded.doc",
    "INSERT INTO settings(key, value) VALUES(?1, ?2) "
    "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
    "INSERT INTO batches(id, owner, created_at, doc) VALUES(?1, ?2, ?3, ?4) "
    "ON CONFLICT(id) DO UPDATE SET owner = excluded.owner, created_at = excluded.created_at, "
    "doc = excluded.doc",
    "INSERT INTO audit(seq, at, actor, token, address, action, target, detail) "
    "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    "INSERT INTO secrets(job_id, doc) VALUES(?1, ?2) ON CONFLICT(job_id) DO UPDATE SET doc = excluded.doc",
    "DELETE FROM secrets WHERE job_id = ?1",
    "SELECT id, owner, status, created_at, doc FROM jobs ORDER BY created_at, id",
    "SELECT id, name, doc FROM nodes ORDER BY id",
    "SELECT id, name, created_at FROM users ORDER BY id",
    "SELECT hash, kind, subject, created_at, name, scope, expires_at, last_used_at FROM tokens "
    "ORDER BY hash",
    "SELECT owner, key, job_id FROM idempotency ORDER BY owner, key",
    "SELECT seq, at, kind, job_id, doc FROM ledger ORDER BY seq",
    "SELECT hash, doc FROM cards ORDER BY hash",
    "SELECT key, value FROM settings ORDER BY key",
    "SELECT id, owner, created_at, doc FROM batches ORDER BY created_at, id",
    "SELECT seq, at, actor, token, address, action, target, detail FROM audit ORDER BY seq",
    "SELECT job_id, doc FROM secrets ORDER BY job_id",
};

class SqliteStore final : public Store {
 public:
  SqliteStore(DbPtr db, int schema_version) : db_(std::move(db)), schema_version_(schema_version) {}

  Status Prepare() {
    for (int i = 0; i < kNumStmts; ++i) {
      sqlite3_stmt* raw = nullptr;
      int rc = sqlite3_prepare_v3(db_.get(), kSql[i], -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
      stmts_[i].reset(raw);
      if (rc != SQLITE_OK) {
        return SqliteStatus(rc, std::string("prepare \"") + kSql[i] + "\"",
                            sqlite3_errmsg(db_.get()));
      }
    }
    return Status::Ok();
  }

  Status Write(const WriteBatch& batch) override {
    if (batch.empty()) return Status::Ok();
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return broken_;
    TIDE_RETURN_IF_ERROR(Run(kBegin, "store write: begin"));
    Status st = WriteRows(batch);
    if (st.ok()) st = Run(kCommit, "store write: commit");
    if (!st.ok()) st = Rollback(st);
    return st;
  }

  Result<Contents> LoadAll() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return broken_;
    // One read transaction: the tables are read as of a single instant.
    TIDE_RETURN_IF_ERROR(Run(kBeginRead, "store load: begin"));
    Contents c;
    Status st = ReadRows(c);
    if (st.ok()) st = Run(kCommit, "store load: commit");
    if (!st.ok()) return Rollback(st);
    return c;
  }

  int SchemaVersion() const override { return schema_version_; }

 private:
  // Binds `values` to statement `id` and runs it to completion.
  // REQUIRES: mu_ held.
  template <typename... Values>
  Status Run(StmtId id, const std::string& context, const Values&... values) {
    sqlite3_stmt* stmt = stmts_[id].get();
    ResetOnExit reset(stmt);
    int rc = BindAll(stmt, values...);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) return Status::Ok();
    return SqliteStatus(rc, context, sqlite3_errmsg(db_.get()));
  }

  // REQUIRES: mu_ held, inside a write transaction.
  Status WriteRows(const WriteBatch& batch) {
    for (const JobRow& j : batch.jobs) {
      TIDE_RETURN_IF_ERROR(Run(kUpsertJob, "store write: jobs row \"" + j.id + "\"", j.id, j.owner,
                               j.status, j.created_at, j.doc));
    }
    for (const NodeRow& n : batch.nodes) {
      TIDE_RETURN_IF_ERROR(
          Run(kUpsertNode, "store write: nodes row \"" + n.id + "\"", n.id, n.name, n.doc));
    }
    for (const UserRow& u : batch.users) {
      TIDE_RETURN_IF_ERROR(
          Run(kUpsertUser, "store write: users row \"" + u.id + "\"", u.id, u.name, u.created_at));
    }
    // Token hashes stay out of error messages.
    for (const TokenRow& t : batch.tokens) {
      TIDE_RETURN_IF_ERROR(
          Run(kUpsertToken, "store write: tokens row", t.hash, t.kind, t.subject, t.created_at,
              t.name, t.scope, t.expires_at, t.last_used_at));
    }
    // After the inserts: a token created and deleted within one batch is gone.
    for (const std::string& hash : batch.delete_tokens) {
      TIDE_RETURN_IF_ERROR(Run(kDeleteToken, "store write: tokens delete", hash));
    }
    for (const IdempotencyRow& i : batch.idempotency) {
      TIDE_RETURN_IF_ERROR(
          Run(kUpsertIdempotency,
              "store write: idempotency row (\"" + i.owner + "\", \"" + i.key + "\")", i.owner,
              i.key, i.job_id));
    }
    for (const LedgerRow& l : batch.ledger) {
      TIDE_RETURN_IF_ERROR(Run(kInsertLedger, "store write: ledger row " + std::to_string(l.seq),
                               l.seq, l.at, l.kind, l.job_id, l.doc));
    }
    // Card hashes stay out of error messages, like token hashes.
    for (const CardRow& c : batch.cards) {
      TIDE_RETURN_IF_ERROR(Run(kUpsertCard, "store write: cards row", c.hash, c.doc));
    }
    for (const SettingRow& s : batch.settings) {
      TIDE_RETURN_IF_ERROR(
          Run(kUpsertSetting, "store write: settings row \"" + s.key + "\"", s.key, s.value));
    }
    for (const BatchRow& b : batch.batches) {
      TIDE_RETURN_IF_ERROR(Run(kUpsertBatch, "store write: batches row \"" + b.id + "\"", b.id,
                               b.owner, b.created_at, b.doc));
    }
    for (const AuditRow& a : batch.audit) {
      TIDE_RETURN_IF_ERROR(Run(kInsertAudit, "store write: audit row " + std::to_string(a.seq),
                               a.seq, a.at, a.actor, a.token, a.address, a.action, a.target,
                               a.detail));
    }
    // Values stay out of error messages; a secret added and deleted within
    // one batch is gone.
    for (const SecretRow& s : batch.secrets) {
      TIDE_RETURN_IF_ERROR(
          Run(kUpsertSecret, "store write: secrets row \"" + s.job_id + "\"", s.job_id, s.doc));
    }
    for (const std::string& id : batch.delete_secrets) {
      TIDE_RETURN_IF_ERROR(Run(kDeleteSecret, "store write: secrets delete \"" + id + "\"", id));
    }
    return Status::Ok();
  }

  // Steps statement `id` and appends `read(stmt)` for each row to `out`.
  // REQUIRES: mu_ held.
  template <typename Row, typename ReadRow>
  Status Select(StmtId id, const char* table, std::vector<Row>& out, ReadRow read) {
    sqlite3_stmt* stmt = stmts_[id].get();
    ResetOnExit reset(stmt);
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) out.push_back(read(stmt));
    if (rc == SQLITE_DONE) return Status::Ok();
    return SqliteStatus(rc, std::string("store load: ") + table, sqlite3_errmsg(db_.get()));
  }

  // REQUIRES: mu_ held, inside a read transaction.
  Status ReadRows(Contents& c) {
    TIDE_RETURN_IF_ERROR(Select(kSelectJobs, "jobs", c.jobs, [](sqlite3_stmt* s) {
      return JobRow{ColumnText(s, 0), ColumnText(s, 1), ColumnText(s, 2),
                    sqlite3_column_int64(s, 3), ColumnText(s, 4)};
    }));
    TIDE_RETURN_IF_ERROR(Select(kSelectNodes, "nodes", c.nodes, [](sqlite3_stmt* s) {
      return NodeRow{ColumnText(s, 0), ColumnText(s, 1), ColumnText(s, 2)};
    }));
    TIDE_RETURN_IF_ERROR(Select(kSelectUsers, "users", c.users, [](sqlite3_stmt* s) {
      return UserRow{ColumnText(s, 0), ColumnText(s, 1), sqlite3_column_int64(s, 2)};
    }));
    TIDE_RETURN_IF_ERROR(Select(kSelectTokens, "tokens", c.tokens, [](sqlite3_stmt* s) {
      return TokenRow{ColumnText(s, 0),           ColumnText(s, 1),
                      ColumnText(s, 2),           sqlite3_column_int64(s, 3),
                      ColumnText(s, 4),           ColumnText(s, 5),
                      sqlite3_column_int64(s, 6), sqlite3_column_int64(s, 7)};
    }));
    TIDE_RETURN_IF_ERROR(
        Select(kSelectIdempotency, "idempotency", c.idempotency, [](sqlite3_stmt* s) {
          return IdempotencyRow{ColumnText(s, 0), ColumnText(s, 1), ColumnText(s, 2)};
        }));
    TIDE_RETURN_IF_ERROR(Select(kSelectLedger, "ledger", c.ledger, [](sqlite3_stmt* s) {
      return LedgerRow{sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1), ColumnText(s, 2),
                       ColumnText(s, 3), ColumnText(s, 4)};
    }));
    TIDE_RETURN_IF_ERROR(Select(kSelectCards, "cards", c.cards, [](sqlite3_stmt* s) {
      return CardRow{ColumnText(s, 0), ColumnText(s, 1)};
    }));
    TIDE_RETURN_IF_ERROR(Select(kSelectSettings, "settings", c.settings, [](sqlite3_stmt* s) {
      return SettingRow{ColumnText(s, 0), ColumnText(s, 1)};
    }));
    TIDE_RETURN_IF_ERROR(Select(kSelectBatches, "batches", c.batches, [](sqlite3_stmt* s) {
      return BatchRow{ColumnText(s, 0), ColumnText(s, 1), sqlite3_column_int64(s, 2),
                      ColumnText(s, 3)};
    }));
    TIDE_RETURN_IF_ERROR(Select(kSelectAudit, "audit", c.audit, [](sqlite3_stmt* s) {
      return AuditRow{sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1), ColumnText(s, 2),
                      ColumnText(s, 3),           ColumnText(s, 4),           ColumnText(s, 5),
                      ColumnText(s, 6),           ColumnText(s, 7)};
    }));
    TIDE_RETURN_IF_ERROR(Select(kSelectSecrets, "secrets", c.secrets, [](sqlite3_stmt* s) {
      return SecretRow{ColumnText(s, 0), ColumnText(s, 1)};
    }));
    return Status::Ok();
  }

  // Ends the failed transaction and returns `cause`, or, if the ROLLBACK
  // fails, a status naming both and marks the store broken.
  // REQUIRES: mu_ held.
  Status Rollback(Status cause) {
    // Some errors (I/O, full disk) make SQLite roll back by itself.
    if (sqlite3_get_autocommit(db_.get())) return cause;
    Status st = Run(kRollback, "rollback");
    if (st.ok()) return cause;
    broken_ = Status::Internal(cause.message() + "; " + st.message() +
                               "; the store refuses further use until reopened");
    return broken_;
  }

  DbPtr db_;  // destroyed last, after the statements
  const int schema_version_;
  std::mutex mu_;
  StmtPtr stmts_[kNumStmts];  // GUARDED_BY(mu_)
  Status broken_;             // GUARDED_BY(mu_); ok unless a ROLLBACK failed
};

// Runs a PRAGMA that returns one text value, e.g. "journal_mode=WAL" -> "wal".
Result<std::string> PragmaText(sqlite3* db, const std::string& pragma) {
  const std::string sql = "PRAGMA " + pragma;
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &raw, nullptr);
  StmtPtr stmt(raw);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt.get());
  if (rc == SQLITE_ROW) return ColumnText(stmt.get(), 0);
  if (rc == SQLITE_DONE) return std::string();
  return SqliteStatus(rc, sql, sqlite3_errmsg(db));
}

}  // namespace

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("empty database path");
  const std::string context = "open database " + path;

  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return Status::Internal(context + ": create directory " + parent.string() + ": " +
                              ec.message());
    }
  }

  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  DbPtr db(raw);  // closed on every error path below, even a failed open
  if (rc != SQLITE_OK) {
    return SqliteStatus(rc, context, raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc));
  }
  sqlite3_extended_result_codes(db.get(), 1);
  sqlite3_busy_timeout(db.get(), kBusyTimeoutMs);

  // journal_mode answers with the mode it actually set; WAL can be refused
  // (e.g. on file systems without shared memory support).
  Result<std::string> mode = PragmaText(db.get(), "journal_mode=WAL");
  if (!mode.ok()) return mode.status().WithContext(context);
  if (*mode != "wal") {
    return Status::Internal(context + ": could not enable WAL mode (journal_mode is \"" + *mode +
                            "\")");
  }
  // Per connection, so set on every open. FULL: fsync the WAL on each COMMIT.
  TIDE_RETURN_IF_ERROR(ExecSql(db.get(), "PRAGMA synchronous=FULL", context));
  // Deleted rows (secrets, removed jobs' records) are overwritten with
  // zeros in the database file, not left in its free pages.
  TIDE_RETURN_IF_ERROR(ExecSql(db.get(), "PRAGMA secure_delete=ON", context));
  TIDE_RETURN_IF_ERROR(ExecSql(db.get(), "PRAGMA foreign_keys=ON", context));

  Result<int> version = internal::ApplyMigrations(db.get(), SystemClock::Default()->NowMs());
  if (!version.ok()) return version.status().WithContext(context);

  auto store = std::make_unique<SqliteStore>(std::move(db), *version);
  Status st = store->Prepare();
  if (!st.ok()) return st.WithContext(context);
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace tide::store
