// Numbered schema migrations of the SQLite store; see migrations.h.
//
// To change the schema, append a migration with the next version number.
// Never edit or reorder a released one: databases in the field have already
// applied it and will not run it again.
#include "store/migrations.h"

#include <sqlite3.h>

#include <iterator>
#include <memory>
#include <string>
#include <utility>

namespace tide::store::internal {
namespace {

constexpr Migration kMigrations[] = {
    {1, "initial schema", R"sql(
CREATE TABLE jobs(
  id TEXT NOT NULL PRIMARY KEY,
  owner TEXT NOT NULL,
  status TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  doc TEXT NOT NULL
);
CREATE INDEX jobs_owner_created_at ON jobs(owner, created_at);
CREATE INDEX jobs_status ON jobs(status);

CREATE TABLE nodes(
  id TEXT NOT NULL PRIMARY KEY,
  name TEXT NOT NULL,
  doc TEXT NOT NULL
);

CREATE TABLE users(
  id TEXT NOT NULL PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  created_at INTEGER NOT NULL
);

CREATE TABLE tokens(
  hash TEXT NOT NULL PRIMARY KEY,
  kind TEXT NOT NULL,
  subject TEXT NOT NULL,
  created_at INTEGER NOT NULL
);

CREATE TABLE idempotency(
  owner TEXT NOT NULL,
  key TEXT NOT NULL,
  job_id TEXT NOT NULL,
  PRIMARY KEY(owner, key)
);
)sql"},
    {2, "ledger, compute cards and settings", R"sql(
CREATE TABLE ledger(
  seq INTEGER NOT NULL PRIMARY KEY,
  at INTEGER NOT NULL,
  kind TEXT NOT NULL,
  job_id TEXT NOT NULL,
  doc TEXT NOT NULL
);
CREATE INDEX ledger_job ON ledger(job_id);

CREATE TABLE cards(
  hash TEXT NOT NULL PRIMARY KEY,
  doc TEXT NOT NULL
);

CREATE TABLE settings(
  key TEXT NOT NULL PRIMARY KEY,
  value TEXT NOT NULL
);
)sql"},
    {3, "batches", R"sql(
CREATE TABLE batches(
  id TEXT NOT NULL PRIMARY KEY,
  owner TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  doc TEXT NOT NULL
);
CREATE INDEX batches_owner_created_at ON batches(owner, created_at);
)sql"},
    {4, "named tokens with scopes, expiry and last use", R"sql(
ALTER TABLE tokens ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN scope TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN last_used_at INTEGER NOT NULL DEFAULT 0;
)sql"},
    {5, "the audit log, append-only", R"sql(
CREATE TABLE audit(
  seq INTEGER NOT NULL PRIMARY KEY,
  at INTEGER NOT NULL,
  actor TEXT NOT NULL,
  token TEXT NOT NULL,
  address TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  detail TEXT NOT NULL
);
CREATE INDEX audit_at ON audit(at);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
)sql"},
    {6, "jobs' secrets, apart from their records", R"sql(
CREATE TABLE secrets(
  job_id TEXT NOT NULL PRIMARY KEY,
  doc TEXT NOT NULL
);
)sql"},
};

struct StmtDeleter {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

// Runs `sql`, which binds `?1` to `arg` if it has a parameter and returns at
// most one integer (NULL reads as 0; no row reads as 0).
Result<int64_t> QueryInt(sqlite3* db, const char* sql, int64_t arg, const std::string& context) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &raw, nullptr);
  StmtPtr stmt(raw);
  if (rc != SQLITE_OK) return SqliteStatus(rc, context, sqlite3_errmsg(db));
  if (sqlite3_bind_parameter_count(stmt.get()) > 0) {
    rc = sqlite3_bind_int64(stmt.get(), 1, arg);
    if (rc != SQLITE_OK) return SqliteStatus(rc, context, sqlite3_errmsg(db));
  }
  rc = sqlite3_step(stmt.get());
  if (rc == SQLITE_DONE) return int64_t{0};
  if (rc != SQLITE_ROW) return SqliteStatus(rc, context, sqlite3_errmsg(db));
  return static_cast<int64_t>(sqlite3_column_int64(stmt.get(), 0));
}

Result<int64_t> MaxVersion(sqlite3* db) {
  return QueryInt(db, "SELECT MAX(version) FROM schema_migrations", 0, "read schema version");
}

Status RefuseNewer(int64_t version) {
  return Status::Internal(
      "database schema version " + std::to_string(version) +
      " is newer than this binary supports (" + std::to_string(LatestSchemaVersion()) +
      "); it was written by a newer tide: run that version or restore a backup");
}

// Applies `m` unless already recorded, in one transaction with its
// schema_migrations row.
Status ApplyOne(sqlite3* db, const Migration& m, int64_t now_ms) {
  const std::string context = "schema migration " + std::to_string(m.version) + " (" + m.name + ")";
  // IMMEDIATE takes the write lock now, so a second process opening the same
  // database waits here and then sees the migration as applied.
  TIDE_RETURN_IF_ERROR(ExecSql(db, "BEGIN IMMEDIATE", context));
  Status st = [&]() -> Status {
    Result<int64_t> max = MaxVersion(db);
    if (!max.ok()) return max.status();
    if (*max > LatestSchemaVersion()) return RefuseNewer(*max);
    Result<int64_t> applied = QueryInt(
        db, "SELECT COUNT(*) FROM schema_migrations WHERE version = ?1", m.version, context);
    if (!applied.ok()) return applied.status();
    if (*applied > 0) return Status::Ok();
    TIDE_RETURN_IF_ERROR(ExecSql(db, m.sql, context));
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(
        db, "INSERT INTO schema_migrations(version, applied_at) VALUES(?1, ?2)", -1, &raw, nullptr);
    StmtPtr insert(raw);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(insert.get(), 1, m.version);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(insert.get(), 2, now_ms);
    if (rc == SQLITE_OK) rc = sqlite3_step(insert.get());
    if (rc != SQLITE_DONE) return SqliteStatus(rc, context, sqlite3_errmsg(db));
    return Status::Ok();
  }();
  if (st.ok()) st = ExecSql(db, "COMMIT", context);
  if (!st.ok() && !sqlite3_get_autocommit(db)) {
    Status rollback = ExecSql(db, "ROLLBACK", context);
    if (!rollback.ok()) {
      return Status::Internal(st.message() + "; rollback failed too: " + rollback.message());
    }
  }
  return st;
}

}  // namespace

std::span<const Migration> Migrations() { return kMigrations; }

int LatestSchemaVersion() { return kMigrations[std::size(kMigrations) - 1].version; }

Result<int> ApplyMigrations(sqlite3* db, int64_t now_ms) {
  TIDE_RETURN_IF_ERROR(ExecSql(db,
                               "CREATE TABLE IF NOT EXISTS schema_migrations("
                               "version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
                               "create schema_migrations"));
  // Checked before anything runs, so a newer database is left untouched.
  Result<int64_t> max = MaxVersion(db);
  if (!max.ok()) return max.status();
  if (*max > LatestSchemaVersion()) return RefuseNewer(*max);
  for (const Migration& m : kMigrations) TIDE_RETURN_IF_ERROR(ApplyOne(db, m, now_ms));
  max = MaxVersion(db);
  if (!max.ok()) return max.status();
  return static_cast<int>(*max);
}

Status SqliteStatus(int rc, const std::string& context, const std::string& detail) {
  std::string msg = context + ": " + detail;
  switch (rc & 0xff) {
    case SQLITE_CONSTRAINT:
      return Status::Conflict(std::move(msg));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status::Unavailable(std::move(msg));
    default:
      return Status::Internal(std::move(msg));
  }
}

Status ExecSql(sqlite3* db, const char* sql, const std::string& context) {
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string detail = err != nullptr ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  return SqliteStatus(rc, context, detail);
}

}  // namespace tide::store::internal
