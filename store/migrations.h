// Numbered schema migrations of the SQLite store (internal to store/).
//
// The schema version of a database is the newest version recorded in its
// schema_migrations(version, applied_at) table. Migration N runs in its own
// transaction together with the insert of its schema_migrations row, so a
// crash leaves the database at version N-1 or N, never in between. Migrations
// are append-only: once released, a migration's SQL never changes; a schema
// change is a new migration with the next number.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"

struct sqlite3;

namespace tide::store::internal {

struct Migration {
  int version;       // 1, 2, 3, ... without gaps
  const char* name;  // for errors
  const char* sql;   // one or more statements
};

// All migrations this binary knows, in version order.
std::span<const Migration> Migrations();

// Version of the newest migration this binary knows.
int LatestSchemaVersion();

// Creates schema_migrations if missing and applies every known migration not
// yet recorded, in order, stamping applied_at with `now_ms`. Returns the
// resulting schema version. Fails, changing nothing, if the database records
// a version newer than LatestSchemaVersion() (written by a newer binary).
// REQUIRES: `db` is open and not inside a transaction.
Result<int> ApplyMigrations(sqlite3* db, int64_t now_ms);

// Helpers shared with sqlite_store.cc.

// A non-ok Status for SQLite result code `rc`: constraint violations are
// kConflict, busy or locked databases kUnavailable, anything else kInternal.
// The message is "<context>: <detail>".
Status SqliteStatus(int rc, const std::string& context, const std::string& detail);

// Runs one or more SQL statements that return no rows.
Status ExecSql(sqlite3* db, const char* sql, const std::string& context);

}  // namespace tide::store::internal
