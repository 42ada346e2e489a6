#include "ledger/ledger.h"

#include <set>

namespace tide::ledger {

using nlohmann::json;

std::string UserAccount(const std::string& user_id) { return "user:" + user_id; }
std::string EscrowAccount(const std::string& job_id) { return "escrow:" + job_id; }
std::string ProviderAccount(const std::string& user_id) { return "provider:" + user_id; }

json ToJson(const Transaction& tx) {
  json entries = json::array();
  for (const auto& e : tx.entries) entries.push_back({{"account", e.account}, {"amount", e.amount}});
  json j = {{"seq", tx.seq}, {"at", tx.at}, {"kind", tx.kind}, {"entries", entries}};
  if (!tx.job_id.empty()) j["job_id"] = tx.job_id;
  if (tx.attempt > 0) j["attempt"] = tx.attempt;
  if (tx.rank > 0) j["rank"] = tx.rank;
  if (!tx.memo.empty()) j["memo"] = tx.memo;
  return j;
}

Result<Transaction> TransactionFromJson(const json& j) {
  try {
    if (!j.is_object()) return Status::InvalidArgument("ledger transaction must be an object");
    Transaction tx;
    tx.seq = j.value("seq", int64_t{0});
    tx.at = j.value("at", int64_t{0});
    tx.kind = j.value("kind", "");
    tx.job_id = j.value("job_id", "");
    tx.attempt = j.value("attempt", 0);
    tx.rank = j.value("rank", 0);
    tx.memo = j.value("memo", "");
    if (!j.contains("entries") || !j["entries"].is_array()) {
      return Status::InvalidArgument("ledger transaction has no entries");
    }
    for (const auto& e : j["entries"]) {
      tx.entries.push_back({e.at("account").get<std::string>(), e.at("amount").get<Micros>()});
    }
    return tx;
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("ledger transaction: ") + e.what());
  }
}

Status Ledger::Validate(const Transaction& tx) const {
  if (tx.kind.empty()) return Status::InvalidArgument("a transaction needs a kind");
  if (tx.entries.size() < 2) return Status::InvalidArgument("a transaction needs two entries or more");
  __int128 sum = 0;
  std::map<std::string, __int128> change;
  for (const auto& e : tx.entries) {
    if (e.account.empty()) return Status::InvalidArgument("an entry has no account");
    if (e.amount == 0) return Status::InvalidArgument("an entry of 0 for " + e.account);
    if (e.amount > kMaxAmount || e.amount < -kMaxAmount) {
      return Status::InvalidArgument("an entry out of range for " + e.account);
    }
    sum += e.amount;
    change[e.account] += e.amount;
  }
  if (sum != 0) {
    return Status::InvalidArgument("the entries of a " + tx.kind + " transaction sum to " +
                                   FormatCredits(static_cast<Micros>(sum)) + ", not 0");
  }
  for (const auto& [account, delta] : change) {
    if (account == kIssued) continue;
    auto it = balances_.find(account);
    __int128 after = (it == balances_.end() ? 0 : it->second) + delta;
    if (after < 0) {
      return Status::InsufficientCredit(
          account + " would go below zero: it holds " +
          FormatCredits(it == balances_.end() ? 0 : it->second) + ", the " + tx.kind + " takes " +
          FormatCredits(static_cast<Micros>(-delta)));
    }
  }
  return Status::Ok();
}

void Ledger::Post(const Transaction& tx) {
  for (const auto& e : tx.entries) balances_[e.account] += e.amount;
  if (!tx.job_id.empty()) by_job_[tx.job_id].push_back(txs_.size());
  txs_.push_back(tx);
}

Status Ledger::Apply(Transaction& tx) {
  TIDE_RETURN_IF_ERROR(Validate(tx));
  tx.seq = last_seq() + 1;
  Post(tx);
  return Status::Ok();
}

Status Ledger::Replay(const Transaction& tx) {
  if (tx.seq != last_seq() + 1) {
    return Status::Internal("ledger transaction " + std::to_string(tx.seq) + " follows " +
                            std::to_string(last_seq()));
  }
  Status st = Validate(tx);
  if (!st.ok()) return Status::Internal("ledger transaction " + std::to_string(tx.seq) + ": " + st.message());
  Post(tx);
  return Status::Ok();
}

Micros Ledger::Balance(const std::string& account) const {
  auto it = balances_.find(account);
  return it == balances_.end() ? 0 : it->second;
}

std::vector<const Transaction*> Ledger::ForJob(const std::string& job_id) const {
  std::vector<const Transaction*> out;
  auto it = by_job_.find(job_id);
  if (it == by_job_.end()) return out;
  for (size_t i : it->second) out.push_back(&txs_[i]);
  return out;
}

Status Ledger::Check() const {
  std::unordered_map<std::string, __int128> fresh;
  for (const auto& tx : txs_) {
    __int128 sum = 0;
    for (const auto& e : tx.entries) {
      fresh[e.account] += e.amount;
      sum += e.amount;
    }
    if (sum != 0) {
      return Status::Internal("transaction " + std::to_string(tx.seq) + " sums to " +
                              FormatCredits(static_cast<Micros>(sum)));
    }
  }
  for (const auto& [account, balance] : fresh) {
    if (balance != Balance(account)) {
      return Status::Internal(account + " holds " + FormatCredits(Balance(account)) +
                              " but its entries sum to " + FormatCredits(static_cast<Micros>(balance)));
    }
    if (account != kIssued && balance < 0) {
      return Status::Internal(account + " is below zero: " + FormatCredits(static_cast<Micros>(balance)));
    }
  }
  for (const auto& [account, balance] : balances_) {
    if (balance != 0 && !fresh.count(account)) {
      return Status::Internal(account + " holds " + FormatCredits(balance) + " without entries");
    }
  }
  Totals t = Summary();
  if (t.issued != t.users + t.escrow + t.providers + t.platform) {
    return Status::Internal("issued " + FormatCredits(t.issued) + " but accounts hold " +
                            FormatCredits(t.users + t.escrow + t.providers + t.platform));
  }
  return Status::Ok();
}

Totals Ledger::Summary() const {
  Totals t;
  for (const auto& [account, balance] : balances_) {
    if (account == kIssued) {
      t.issued = -balance;
    } else if (account == kPlatform) {
      t.platform += balance;
    } else if (account.rfind("user:", 0) == 0) {
      t.users += balance;
    } else if (account.rfind("escrow:", 0) == 0) {
      t.escrow += balance;
    } else if (account.rfind("provider:", 0) == 0) {
      t.providers += balance;
    } else {
      t.platform += balance;  // no other kind exists; counted so nothing hides
    }
  }
  return t;
}

}  // namespace tide::ledger
