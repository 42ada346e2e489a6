// Ledger: double-entry bookkeeping of credit, in memory, checked.
//
// Every movement of credit is a Transaction whose entries sum to zero.
// Accounts are named:
//   issued              where redeemed credit comes from; its balance is
//                       minus all credit ever redeemed (the only account
//                       allowed below zero)
//   user:<id>           a consumer's available balance
//   escrow:<job>        credit held for a job's worst case while it lives
//   provider:<id>       what a provider (a user owning agents) has earned
//   platform            the operator's fees
// Balances are derived from the entries: Apply() refuses a transaction that
// does not sum to zero or would take any account but `issued` below zero,
// and Check() recomputes every balance from scratch and proves that all
// accounts together sum to zero, i.e. that users, escrows, providers and the
// platform hold exactly what was issued.
//
// Pure: no I/O, no clock. The server core owns one Ledger and persists each
// applied transaction in the same store transaction as the change it
// accounts for. Not thread-safe; the core's lock guards it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "ledger/money.h"

namespace tide::ledger {

inline constexpr const char* kIssued = "issued";
inline constexpr const char* kPlatform = "platform";
std::string UserAccount(const std::string& user_id);
std::string EscrowAccount(const std::string& job_id);
std::string ProviderAccount(const std::string& user_id);

struct Entry {
  std::string account;
  Micros amount = 0;  // positive: credited to the account
};

// Kinds: redeem (issued -> user), hold (user -> escrow at submit), charge
// (escrow -> provider + platform, metering an attempt), release (escrow ->
// user, what a finished job did not use).
struct Transaction {
  int64_t seq = 0;  // assigned by Apply, 1, 2, ...
  int64_t at = 0;   // unix ms
  std::string kind;
  std::string job_id;  // hold, charge, release
  int attempt = 0;     // charge: the attempt metered
  int rank = 0;        // charge: the rank of a multi-node attempt
  std::string memo;    // card hash prefix, "node n-…", ...
  std::vector<Entry> entries;
};
nlohmann::json ToJson(const Transaction& tx);
Result<Transaction> TransactionFromJson(const nlohmann::json& j);

struct Totals {
  Micros issued = 0;     // all credit ever redeemed
  Micros users = 0;      // available balances
  Micros escrow = 0;     // held for jobs
  Micros providers = 0;  // earned by providers
  Micros platform = 0;   // fees
};

class Ledger {
 public:
  // Validates `tx` and applies it, assigning its seq. Nothing changes on
  // error: kInvalidArgument for a malformed transaction, kInsufficientCredit
  // when an account would go below zero (the message names it).
  Status Apply(Transaction& tx);
  // Applies a transaction read back from the store: its seq must be the next.
  Status Replay(const Transaction& tx);

  Micros Balance(const std::string& account) const;
  // Indices into transactions() of those about `job_id`, oldest first.
  std::vector<const Transaction*> ForJob(const std::string& job_id) const;
  const std::vector<Transaction>& transactions() const { return txs_; }
  int64_t last_seq() const { return static_cast<int64_t>(txs_.size()); }

  // Recomputes every balance from the entries: Ok, or what disagrees.
  Status Check() const;
  Totals Summary() const;

 private:
  Status Validate(const Transaction& tx) const;
  void Post(const Transaction& tx);

  std::vector<Transaction> txs_;
  std::unordered_map<std::string, Micros> balances_;
  std::unordered_map<std::string, std::vector<size_t>> by_job_;
};

}  // namespace tide::ledger
