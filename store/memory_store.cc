// MemoryStore: the Store kept in maps, for tests and `tide sim`.
//
// Same contract as the SQLite store, so one test suite runs on both: rows are
// inserted or replaced by primary key, later rows of a batch win, token
// deletes apply after token inserts, a user name must be unique and a ledger
// seq is written once (a batch that breaks either is refused whole), and LoadAll orders jobs by created_at, then
// id, and every other table by primary key. Nothing survives the process.
// Thread-safe: one mutex guards all state.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "store/migrations.h"
#include "store/store.h"

namespace tide::store {
namespace {

class MemoryStore final : public Store {
 public:
  Status Write(const WriteBatch& batch) override {
    if (batch.empty()) return Status::Ok();
    std::lock_guard<std::mutex> lock(mu_);

    // Users are the only rows that can be refused (name is UNIQUE), so they
    // go first, applied to copies: a refused batch changes nothing.
    if (!batch.users.empty()) TIDE_RETURN_IF_ERROR(WriteUsers(batch.users));
    for (const LedgerRow& l : batch.ledger) {
      if (ledger_.count(l.seq)) {
        return Status::Conflict("store write: ledger row " + std::to_string(l.seq) +
                                ": UNIQUE constraint failed: ledger.seq");
      }
    }
    for (const AuditRow& a : batch.audit) {
      if (audit_.count(a.seq)) {
        return Status::Conflict("store write: audit row " + std::to_string(a.seq) +
                                ": UNIQUE constraint failed: audit.seq");
      }
    }
    for (const LedgerRow& l : batch.ledger) ledger_[l.seq] = l;
    for (const AuditRow& a : batch.audit) audit_[a.seq] = a;
    for (const CardRow& c : batch.cards) cards_[c.hash] = c;
    for (const SettingRow& s : batch.settings) settings_[s.key] = s;
    for (const BatchRow& b : batch.batches) batches_[b.id] = b;
    for (const JobRow& j : batch.jobs) jobs_[j.id] = j;
    for (const NodeRow& n : batch.nodes) nodes_[n.id] = n;
    for (const TokenRow& t : batch.tokens) tokens_[t.hash] = t;
    for (const std::string& hash : batch.delete_tokens) tokens_.erase(hash);
    for (const IdempotencyRow& i : batch.idempotency) idempotency_[{i.owner, i.key}] = i;
    for (const SecretRow& s : batch.secrets) secrets_[s.job_id] = s;
    for (const std::string& id : batch.delete_secrets) secrets_.erase(id);
    return Status::Ok();
  }

  Result<Contents> LoadAll() override {
    std::lock_guard<std::mutex> lock(mu_);
    Contents c;
    c.jobs.reserve(jobs_.size());
    for (const auto& [id, row] : jobs_) c.jobs.push_back(row);
    std::stable_sort(c.jobs.begin(), c.jobs.end(), [](const JobRow& a, const JobRow& b) {
      return a.created_at < b.created_at;  // ties stay in id order
    });
    for (const auto& [id, row] : nodes_) c.nodes.push_back(row);
    for (const auto& [id, row] : users_) c.users.push_back(row);
    for (const auto& [hash, row] : tokens_) c.tokens.push_back(row);
    for (const auto& [key, row] : idempotency_) c.idempotency.push_back(row);
    for (const auto& [seq, row] : ledger_) c.ledger.push_back(row);
    for (const auto& [seq, row] : audit_) c.audit.push_back(row);
    for (const auto& [hash, row] : cards_) c.cards.push_back(row);
    for (const auto& [key, row] : settings_) c.settings.push_back(row);
    for (const auto& [id, row] : batches_) c.batches.push_back(row);
    for (const auto& [id, row] : secrets_) c.secrets.push_back(row);
    std::stable_sort(c.batches.begin(), c.batches.end(),
                     [](const BatchRow& a, const BatchRow& b) { return a.created_at < b.created_at; });
    return c;
  }

  // Always at the newest schema: there is nothing to migrate.
  int SchemaVersion() const override { return internal::LatestSchemaVersion(); }

 private:
  // Applies `rows` in order, or nothing if one would take another user's name.
  // REQUIRES: mu_ held.
  Status WriteUsers(const std::vector<UserRow>& rows) {
    std::map<std::string, UserRow> users = users_;
    std::map<std::string, std::string> user_by_name = user_by_name_;
    for (const UserRow& u : rows) {
      auto taken = user_by_name.find(u.name);
      if (taken != user_by_name.end() && taken->second != u.id) {
        return Status::Conflict("store write: users row \"" + u.id +
                                "\": UNIQUE constraint failed: users.name");
      }
      auto old = users.find(u.id);
      if (old != users.end()) user_by_name.erase(old->second.name);
      user_by_name[u.name] = u.id;
      users[u.id] = u;
    }
    users_ = std::move(users);
    user_by_name_ = std::move(user_by_name);
    return Status::Ok();
  }

  std::mutex mu_;
  std::map<std::string, JobRow> jobs_;               // by id; GUARDED_BY(mu_)
  std::map<std::string, NodeRow> nodes_;             // by id; GUARDED_BY(mu_)
  std::map<std::string, UserRow> users_;             // by id; GUARDED_BY(mu_)
  std::map<std::string, std::string> user_by_name_;  // name -> id; GUARDED_BY(mu_)
  std::map<std::string, TokenRow> tokens_;           // by hash; GUARDED_BY(mu_)
  std::map<std::pair<std::string, std::string>, IdempotencyRow>
      idempotency_;  // by (owner, key); GUARDED_BY(mu_)
  std::map<int64_t, LedgerRow> ledger_;        // by seq; GUARDED_BY(mu_)
  std::map<int64_t, AuditRow> audit_;          // by seq; GUARDED_BY(mu_)
  std::map<std::string, CardRow> cards_;       // by hash; GUARDED_BY(mu_)
  std::map<std::string, SettingRow> settings_;  // by key; GUARDED_BY(mu_)
  std::map<std::string, BatchRow> batches_;     // by id; GUARDED_BY(mu_)
  std::map<std::string, SecretRow> secrets_;    // by job id; GUARDED_BY(mu_)
};

}  // namespace

std::unique_ptr<Store> NewMemoryStore() { return std::make_unique<MemoryStore>(); }

}  // namespace tide::store
