// One Store suite, run on every implementation (MemoryStore, SqliteStore).
//
// Tests that need a file (reopen, migrations) skip on stores that keep
// nothing across a reopen.
#include "store/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "store/migrations.h"

namespace tide::store {

// Comparisons and printing for EXPECT_EQ on rows (test only).
bool operator==(const JobRow& a, const JobRow& b) {
  return std::tie(a.id, a.owner, a.status, a.created_at, a.doc) ==
         std::tie(b.id, b.owner, b.status, b.created_at, b.doc);
}
bool operator==(const NodeRow& a, const NodeRow& b) {
  return std::tie(a.id, a.name, a.doc) == std::tie(b.id, b.name, b.doc);
}
bool operator==(const UserRow& a, const UserRow& b) {
  return std::tie(a.id, a.name, a.created_at) == std::tie(b.id, b.name, b.created_at);
}
TokenRow Token(std::string hash, std::string kind, std::string subject, int64_t created_at,
               std::string name = "", std::string scope = "", int64_t expires_at = 0,
               int64_t last_used_at = 0) {
  TokenRow t;
  t.hash = std::move(hash);
  t.kind = std::move(kind);
  t.subject = std::move(subject);
  t.created_at = created_at;
  t.name = std::move(name);
  t.scope = std::move(scope);
  t.expires_at = expires_at;
  t.last_used_at = last_used_at;
  return t;
}

bool operator==(const TokenRow& a, const TokenRow& b) {
  return std::tie(a.hash, a.kind, a.subject, a.created_at, a.name, a.scope, a.expires_at,
                  a.last_used_at) == std::tie(b.hash, b.kind, b.subject, b.created_at, b.name,
                                              b.scope, b.expires_at, b.last_used_at);
}
bool operator==(const SecretRow& a, const SecretRow& b) {
  return std::tie(a.job_id, a.doc) == std::tie(b.job_id, b.doc);
}
bool operator==(const IdempotencyRow& a, const IdempotencyRow& b) {
  return std::tie(a.owner, a.key, a.job_id) == std::tie(b.owner, b.key, b.job_id);
}
bool operator==(const LedgerRow& a, const LedgerRow& b) {
  return std::tie(a.seq, a.at, a.kind, a.job_id, a.doc) ==
         std::tie(b.seq, b.at, b.kind, b.job_id, b.doc);
}
bool operator==(const CardRow& a, const CardRow& b) {
  return std::tie(a.hash, a.doc) == std::tie(b.hash, b.doc);
}
bool operator==(const BatchRow& a, const BatchRow& b) {
  return a.id == b.id && a.owner == b.owner && a.created_at == b.created_at && a.doc == b.doc;
}
bool operator==(const AuditRow& a, const AuditRow& b) {
  return std::tie(a.seq, a.at, a.actor, a.token, a.address, a.action, a.target, a.detail) ==
         std::tie(b.seq, b.at, b.actor, b.token, b.address, b.action, b.target, b.detail);
}
bool operator==(const SettingRow& a, const SettingRow& b) {
  return std::tie(a.key, a.value) == std::tie(b.key, b.value);
}
void PrintTo(const JobRow& r, std::ostream* os) {
  *os << "JobRow{" << r.id << ", " << r.owner << ", " << r.status << ", " << r.created_at << ", "
      << r.doc << "}";
}
void PrintTo(const NodeRow& r, std::ostream* os) {
  *os << "NodeRow{" << r.id << ", " << r.name << ", " << r.doc << "}";
}
void PrintTo(const UserRow& r, std::ostream* os) {
  *os << "UserRow{" << r.id << ", " << r.name << ", " << r.created_at << "}";
}
void PrintTo(const TokenRow& r, std::ostream* os) {
  *os << "TokenRow{" << r.hash << ", " << r.kind << ", " << r.subject << ", " << r.created_at
      << ", " << r.name << ", " << r.scope << ", " << r.expires_at << ", " << r.last_used_at << "}";
}
void PrintTo(const IdempotencyRow& r, std::ostream* os) {
  *os << "IdempotencyRow{" << r.owner << ", " << r.key << ", " << r.job_id << "}";
}
void PrintTo(const LedgerRow& r, std::ostream* os) {
  *os << "LedgerRow{" << r.seq << ", " << r.at << ", " << r.kind << ", " << r.job_id << ", " << r.doc
      << "}";
}

namespace {

JobRow Job(const std::string& id, int64_t created_at, const std::string& status = "queued") {
  return JobRow{id, "u-1", status, created_at,
                R"({"id":")" + id + R"(","status":")" + status + R"("})"};
}

std::vector<std::string> JobIds(const Contents& c) {
  std::vector<std::string> ids;
  for (const JobRow& j : c.jobs) ids.push_back(j.id);
  return ids;
}

// The database file, in a directory OpenSqliteStore has to create.
std::string DbPath(const std::string& dir) { return dir + "/state/tide.db"; }

struct Backend {
  const char* name;
  bool durable;  // keeps its rows across a reopen of the same dir
  Result<std::unique_ptr<Store>> (*open)(const std::string& dir);
};

const Backend kBackends[] = {
    {"Memory", false,
     [](const std::string&) -> Result<std::unique_ptr<Store>> { return NewMemoryStore(); }},
    {"Sqlite", true, [](const std::string& dir) { return OpenSqliteStore(DbPath(dir)); }},
};

// Direct access to the database file, behind the store's back.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  }
  ~RawDb() { sqlite3_close_v2(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  void Exec(const std::string& sql) {
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
        << sql << ": " << (err != nullptr ? err : "");
    sqlite3_free(err);
  }

  // The first column of the first row as text ("" if none).
  std::string Query(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK)
        << sql << ": " << sqlite3_errmsg(db_);
    std::string out;
    if (stmt != nullptr && sqlite3_step(stmt) == SQLITE_ROW &&
        sqlite3_column_text(stmt, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

class StoreTest : public testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    std::string tmpl = testing::TempDir() + "tide_store_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    Reopen();
  }

  void TearDown() override {
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void Reopen() {
    store_.reset();
    Result<std::unique_ptr<Store>> store = GetParam().open(dir_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
  }

  void Write(const WriteBatch& batch) {
    Status st = store_->Write(batch);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  Contents Load() {
    Result<Contents> c = store_->LoadAll();
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : Contents{};
  }

  bool durable() const { return GetParam().durable; }
  std::string db_path() const { return DbPath(dir_); }

  std::string dir_;
  std::unique_ptr<Store> store_;
};

WriteBatch OneOfEach() {
  WriteBatch b;
  b.jobs = {Job("j-1", 100)};
  b.nodes = {{"n-1", "gpu-box-1", R"({"gpus":8})"}};
  b.users = {{"u-1", "alice", 10}};
  b.tokens = {Token("aa11", "user", "u-1", 11, "ci", "submit", 99'000, 42), Token("bb22", "admin", "", 12)};
  b.idempotency = {{"u-1", "key-1", "j-1"}};
  b.ledger = {{1, 20, "redeem", "", R"({"seq":1})"}, {2, 21, "hold", "j-1", R"({"seq":2})"}};
  b.cards = {{"cc33", R"({"value":5})"}};
  b.settings = {{"prices", R"({"fee":"0.1"})"}};
  b.batches = {{"b-1", "u-1", 30, R"({"trials":2})"}};
  b.audit = {{1, 40, "admin", "", "10.0.0.7", "card.mint", "", R"({"count":2})"},
             {2, 41, "u-1", "ut-1", "::1", "token.create", "ut-2", R"({"name":"ci"})"}};
  b.secrets = {{"j-1", R"({"HF_TOKEN":"hf_abc"})"}};
  return b;
}

TEST_P(StoreTest, WritesAndReadsBackEveryRowKind) {
  const WriteBatch b = OneOfEach();
  Write(b);
  Contents c = Load();
  EXPECT_EQ(c.jobs, b.jobs);
  EXPECT_EQ(c.nodes, b.nodes);
  EXPECT_EQ(c.users, b.users);
  EXPECT_EQ(c.tokens, b.tokens);
  EXPECT_EQ(c.idempotency, b.idempotency);
  EXPECT_EQ(c.ledger, b.ledger);
  EXPECT_EQ(c.cards, b.cards);
  EXPECT_EQ(c.settings, b.settings);
  EXPECT_EQ(c.batches, b.batches);
  EXPECT_EQ(c.audit, b.audit);
  EXPECT_EQ(c.secrets, b.secrets);
}

TEST_P(StoreTest, DeletesSecretsAfterWritingThem) {
  Write(OneOfEach());
  WriteBatch b;
  b.secrets = {{"j-2", R"({"A":"secret-of-j2"})"}, {"j-3", R"({"B":"secret-of-j3"})"}};
  b.delete_secrets = {"j-1", "j-2"};  // j-2 is added and deleted in one batch
  Write(b);
  Contents c = Load();
  ASSERT_EQ(c.secrets.size(), 1u);
  EXPECT_EQ(c.secrets[0].job_id, "j-3");
  if (!durable()) return;
  // Closing checkpoints the WAL into the file: a deleted value is not left
  // in the file's free space.
  store_.reset();
  std::ifstream in(db_path(), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes.find("hf_abc"), std::string::npos);
  EXPECT_EQ(bytes.find("secret-of-j2"), std::string::npos);
  EXPECT_NE(bytes.find("secret-of-j3"), std::string::npos);
}

TEST_P(StoreTest, LedgerRowsAreWrittenOnce) {
  Write(OneOfEach());
  WriteBatch again;
  again.jobs = {Job("j-2", 200)};
  again.ledger = {{2, 99, "charge", "j-1", "{}"}};  // seq 2 exists
  EXPECT_FALSE(store_->Write(again).ok());
  Contents c = Load();
  EXPECT_EQ(c.jobs.size(), 1u) << "the refused batch left nothing";
  ASSERT_EQ(c.ledger.size(), 2u);
  EXPECT_EQ(c.ledger[1].kind, "hold");
}

TEST_P(StoreTest, AuditRowsAreWrittenOnce) {
  Write(OneOfEach());
  WriteBatch again;
  again.jobs = {Job("j-2", 200)};
  again.audit = {{2, 99, "admin", "", "", "user.create", "u-9", "{}"}};  // seq 2 exists
  EXPECT_FALSE(store_->Write(again).ok());
  Contents c = Load();
  EXPECT_EQ(c.jobs.size(), 1u) << "the refused batch left nothing";
  ASSERT_EQ(c.audit.size(), 2u);
  EXPECT_EQ(c.audit[1].action, "token.create");
  if (!durable()) return;
  // Behind the store's back too, the log can only grow.
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db_path().c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  for (const char* sql : {"UPDATE audit SET actor = 'someone' WHERE seq = 1",
                          "DELETE FROM audit WHERE seq = 1"}) {
    char* err = nullptr;
    EXPECT_NE(sqlite3_exec(db, sql, nullptr, nullptr, &err), SQLITE_OK) << sql;
    EXPECT_NE(std::string(err != nullptr ? err : "").find("append-only"), std::string::npos) << sql;
    sqlite3_free(err);
  }
  sqlite3_close_v2(db);
  Reopen();
  EXPECT_EQ(Load().audit, OneOfEach().audit);
}

TEST_P(StoreTest, KeepsTextVerbatim) {
  WriteBatch b;
  JobRow j = Job("j-1", 1);
  j.doc = std::string("{\"cmd\":\"echo 'hi' \\u00e9 ✓\",\"nul\":\"") + '\0' + "\"}";
  j.owner = "";  // empty text is text, not NULL
  b.jobs = {j};
  Write(b);
  EXPECT_EQ(Load().jobs, b.jobs);
}

TEST_P(StoreTest, ReplacesRowsByKey) {
  Write(OneOfEach());
  WriteBatch b;
  b.jobs = {Job("j-1", 100, "running")};
  b.nodes = {{"n-1", "gpu-box-1", R"({"gpus":4})"}};
  b.users = {{"u-1", "alice2", 10}};
  b.tokens = {Token("aa11", "user", "u-2", 13)};
  b.idempotency = {{"u-1", "key-1", "j-2"}};
  Write(b);

  Contents c = Load();
  EXPECT_EQ(c.jobs, b.jobs);
  EXPECT_EQ(c.nodes, b.nodes);
  EXPECT_EQ(c.users, b.users);
  ASSERT_EQ(c.tokens.size(), 2u);
  EXPECT_EQ(c.tokens[0], b.tokens[0]);
  EXPECT_EQ(c.idempotency, b.idempotency);
}

TEST_P(StoreTest, LaterRowInBatchWins) {
  WriteBatch first;
  first.jobs = {Job("j-1", 1, "queued")};
  first.users = {{"u-1", "alice", 1}};
  first.idempotency = {{"u-1", "k", "j-1"}};
  WriteBatch second;
  second.jobs = {Job("j-1", 1, "running")};
  second.users = {{"u-1", "bob", 1}, {"u-2", "alice", 2}};  // alice is free again
  second.idempotency = {{"u-1", "k", "j-2"}};
  WriteBatch merged;
  merged.Append(std::move(first));
  merged.Append(std::move(second));
  ASSERT_EQ(merged.jobs.size(), 2u);
  Write(merged);

  Contents c = Load();
  ASSERT_EQ(c.jobs.size(), 1u);
  EXPECT_EQ(c.jobs[0].status, "running");
  EXPECT_EQ(c.users, (std::vector<UserRow>{{"u-1", "bob", 1}, {"u-2", "alice", 2}}));
  ASSERT_EQ(c.idempotency.size(), 1u);
  EXPECT_EQ(c.idempotency[0].job_id, "j-2");
}

TEST_P(StoreTest, DeletesTokens) {
  Write(OneOfEach());
  WriteBatch b;
  b.delete_tokens = {"aa11", "no-such-hash"};
  Write(b);
  Contents c = Load();
  ASSERT_EQ(c.tokens.size(), 1u);
  EXPECT_EQ(c.tokens[0].hash, "bb22");

  // Deletes apply after inserts: a join token created and used in one
  // group commit is gone.
  WriteBatch join;
  join.tokens = {Token("cc33", "join", "", 20)};
  join.delete_tokens = {"cc33"};
  Write(join);
  EXPECT_EQ(Load().tokens.size(), 1u);
}

TEST_P(StoreTest, OrdersJobsByCreatedAtThenId) {
  WriteBatch b;
  b.jobs = {Job("j-c", 20), Job("j-b", 10), Job("j-z", 5), Job("j-a", 10), Job("j-0", 30)};
  Write(b);
  EXPECT_EQ(JobIds(Load()), (std::vector<std::string>{"j-z", "j-a", "j-b", "j-c", "j-0"}));
}

TEST_P(StoreTest, EmptyBatchChangesNothing) {
  WriteBatch empty;
  EXPECT_TRUE(empty.empty());
  Write(empty);
  Contents c = Load();
  EXPECT_TRUE(c.jobs.empty());
  EXPECT_TRUE(c.users.empty());

  Write(OneOfEach());
  Write(empty);
  EXPECT_EQ(Load().jobs.size(), 1u);
}

TEST_P(StoreTest, FailedBatchLeavesNothingBehind) {
  WriteBatch setup;
  setup.users = {{"u-1", "alice", 1}};
  Write(setup);

  WriteBatch bad;
  bad.jobs = {Job("j-1", 1), Job("j-2", 2)};
  bad.nodes = {{"n-1", "box", "{}"}};
  bad.users = {{"u-3", "carol", 3}, {"u-2", "alice", 2}};  // alice belongs to u-1
  bad.tokens = {Token("aa11", "user", "u-2", 2)};
  bad.idempotency = {{"u-2", "k", "j-1"}};
  Status st = store_->Write(bad);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kConflict) << st.ToString();
  EXPECT_NE(st.message().find("users"), std::string::npos) << st.ToString();

  Contents c = Load();
  EXPECT_TRUE(c.jobs.empty());
  EXPECT_TRUE(c.nodes.empty());
  EXPECT_EQ(c.users, setup.users);
  EXPECT_TRUE(c.tokens.empty());
  EXPECT_TRUE(c.idempotency.empty());

  // The store is still usable.
  WriteBatch good;
  good.jobs = {Job("j-1", 1)};
  Write(good);
  EXPECT_EQ(Load().jobs, good.jobs);
  if (durable()) {
    Reopen();
    EXPECT_EQ(Load().jobs, good.jobs);
    EXPECT_EQ(Load().users, setup.users);
  }
}

TEST_P(StoreTest, WritesThousandJobsInOneBatch) {
  WriteBatch b;
  for (int i = 0; i < 1000; ++i) {
    char id[16];
    snprintf(id, sizeof id, "j-%04d", i);
    b.jobs.push_back(Job(id, 1000 - i / 10));
  }
  Write(b);
  Contents c = Load();
  ASSERT_EQ(c.jobs.size(), 1000u);
  EXPECT_EQ(c.jobs.front().id, "j-0990");  // created_at 901, the smallest
  EXPECT_EQ(c.jobs.back().id, "j-0009");   // created_at 1000, largest id
}

TEST_P(StoreTest, ConcurrentWritersAllLand) {
  constexpr int kThreads = 4;
  constexpr int kWritesPerThread = 10;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      for (int i = 0; i < kWritesPerThread; ++i) {
        WriteBatch b;
        b.jobs = {Job("j-" + std::to_string(t) + "-" + std::to_string(i), i)};
        EXPECT_TRUE(store_->Write(b).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(Load().jobs.size(), static_cast<size_t>(kThreads * kWritesPerThread));
}

TEST_P(StoreTest, SchemaVersionIsLatest) {
  EXPECT_EQ(internal::LatestSchemaVersion(), 6);
  EXPECT_EQ(store_->SchemaVersion(), 6);
  if (!durable()) return;
  RawDb db(db_path());
  EXPECT_EQ(db.Query("SELECT COUNT(*) FROM schema_migrations"), "6");
  EXPECT_EQ(db.Query("SELECT MAX(version) FROM schema_migrations"), "6");
  EXPECT_EQ(db.Query("PRAGMA journal_mode"), "wal");
  for (const char* table :
       {"jobs", "nodes", "users", "tokens", "idempotency", "ledger", "cards", "settings",
        "batches", "audit", "secrets"}) {
    EXPECT_EQ(db.Query(std::string("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' "
                                   "AND name = '") +
                       table + "'"),
              "1")
        << table;
  }
  EXPECT_EQ(db.Query("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND "
                     "name IN ('jobs_owner_created_at', 'jobs_status')"),
            "2");
}

TEST_P(StoreTest, DataSurvivesReopen) {
  if (!durable()) GTEST_SKIP() << "keeps nothing across a reopen";
  const WriteBatch b = OneOfEach();
  Write(b);
  WriteBatch del;
  del.delete_tokens = {"bb22"};
  Write(del);
  Reopen();
  Contents c = Load();
  EXPECT_EQ(c.jobs, b.jobs);
  EXPECT_EQ(c.nodes, b.nodes);
  EXPECT_EQ(c.users, b.users);
  EXPECT_EQ(c.tokens, std::vector<TokenRow>{b.tokens[0]});
  EXPECT_EQ(c.idempotency, b.idempotency);
}

TEST_P(StoreTest, ReopenDoesNotReapplyMigrations) {
  if (!durable()) GTEST_SKIP() << "no schema on disk";
  std::string applied_at;
  {
    RawDb db(db_path());
    applied_at = db.Query("SELECT applied_at FROM schema_migrations WHERE version = 1");
    EXPECT_NE(applied_at, "");
    // Back-date it, so a re-application would be visible.
    db.Exec("UPDATE schema_migrations SET applied_at = 42 WHERE version = 1");
  }
  Reopen();
  Reopen();
  const int latest = internal::LatestSchemaVersion();
  EXPECT_EQ(store_->SchemaVersion(), latest);
  RawDb db(db_path());
  EXPECT_EQ(db.Query("SELECT COUNT(*) FROM schema_migrations"), std::to_string(latest));
  EXPECT_EQ(db.Query("SELECT applied_at FROM schema_migrations WHERE version = 1"), "42");
}

TEST_P(StoreTest, RefusesDatabaseFromNewerBinary) {
  if (!durable()) GTEST_SKIP() << "no schema on disk";
  Write(OneOfEach());
  store_.reset();
  RawDb(db_path()).Exec("INSERT INTO schema_migrations(version, applied_at) VALUES(999, 1)");

  Result<std::unique_ptr<Store>> store = GetParam().open(dir_);
  ASSERT_FALSE(store.ok());
  const std::string msg = store.status().message();
  EXPECT_NE(msg.find("999"), std::string::npos) << msg;
  EXPECT_NE(msg.find("newer"), std::string::npos) << msg;
  // Left as it was.
  RawDb db(db_path());
  EXPECT_EQ(db.Query("SELECT MAX(version) FROM schema_migrations"), "999");
  EXPECT_EQ(db.Query("SELECT COUNT(*) FROM jobs"), "1");
}

TEST_P(StoreTest, RefusesFileThatIsNotADatabase) {
  if (!durable()) GTEST_SKIP() << "no file";
  store_.reset();
  std::filesystem::remove(db_path());
  std::filesystem::remove(db_path() + "-wal");
  std::filesystem::remove(db_path() + "-shm");
  std::ofstream(db_path()) << std::string(4096, 'x');
  Result<std::unique_ptr<Store>> store = GetParam().open(dir_);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(db_path()), std::string::npos)
      << store.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, testing::ValuesIn(kBackends),
                         [](const testing::TestParamInfo<Backend>& info) {
                           return std::string(info.param.name);
                         });

TEST(WriteBatchTest, AppendMovesRowsInOrder) {
  WriteBatch a;
  a.jobs = {Job("j-1", 1)};
  a.delete_tokens = {"x"};
  WriteBatch b;
  b.jobs = {Job("j-2", 2)};
  b.users = {{"u-1", "alice", 1}};
  b.tokens = {Token("t", "user", "u-1", 1)};
  b.nodes = {{"n-1", "box", "{}"}};
  b.idempotency = {{"u-1", "k", "j-2"}};
  EXPECT_FALSE(a.empty());
  a.Append(std::move(b));
  Contents jobs;
  jobs.jobs = a.jobs;
  EXPECT_EQ(JobIds(jobs), (std::vector<std::string>{"j-1", "j-2"}));
  EXPECT_EQ(a.users.size(), 1u);
  EXPECT_EQ(a.tokens.size(), 1u);
  EXPECT_EQ(a.nodes.size(), 1u);
  EXPECT_EQ(a.idempotency.size(), 1u);
  EXPECT_EQ(a.delete_tokens.size(), 1u);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move): Append leaves it empty

  WriteBatch into_empty;
  into_empty.Append(std::move(a));
  EXPECT_EQ(into_empty.jobs.size(), 2u);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move)
}

TEST(WriteBatchTest, EmptyCountsEveryKind) {
  EXPECT_TRUE(WriteBatch{}.empty());
  WriteBatch b;
  b.delete_tokens = {"x"};
  EXPECT_FALSE(b.empty());
  WriteBatch c;
  c.idempotency = {{"u", "k", "j"}};
  EXPECT_FALSE(c.empty());
  for (int kind = 0; kind < 4; ++kind) {
    WriteBatch d;
    if (kind == 0) d.ledger = {{1, 1, "redeem", "", "{}"}};
    if (kind == 1) d.cards = {{"h", "{}"}};
    if (kind == 2) d.settings = {{"k", "v"}};
    if (kind == 3) d.audit = {{1, 1, "admin", "", "", "user.create", "u-1", "{}"}};
    EXPECT_FALSE(d.empty()) << kind;
  }
}

}  // namespace
}  // namespace tide::store
