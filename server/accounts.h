// Accounts: the server's money. Owns the ledger, the price list, compute
// cards, what each attempt was charged and the daily caps; applies the pure
// policy of ledger/policy.h to them. See docs/money.md.
//
//   Admit    a job's or batch's worst case moves into its escrow, or the
//            submission is refused (balance, daily cap)
//   Meter    running attempts are charged per second from their escrow,
//            split between the provider and the platform
//   Release  what an escrow still holds returns to its owner at the end
//
// Every transaction is applied here on the core thread and its row goes
// into the same store batch as the job, node or card change it is for
// (TakeRows), so a crash between two steps never leaves money half-moved.
// Not thread-safe on its own: the core's state lock guards it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "api/types.h"
#include "common/clock.h"
#include "ledger/ledger.h"
#include "ledger/policy.h"
#include "ledger/prices.h"
#include "server/job_state.h"
#include "store/store.h"

namespace tide::server {

struct BalanceInfo {
  ledger::Micros available = 0;
  ledger::Micros escrow = 0;  // held for the caller's jobs that have not ended
  ledger::Micros daily_cap = 0;    // what their jobs may spend per UTC day; 0 = no cap
  ledger::Micros spent_today = 0;  // charged since UTC midnight
};
// One attempt (one rank of a multi-node attempt) as the consumer pays it.
struct UsageLine {
  std::string job_id;
  std::string name;
  int attempt = 0;
  int rank = 0;
  std::string node_id;
  std::string gpu_model;
  int gpus = 0;
  int64_t started_at = 0;
  int64_t finished_at = 0;  // 0 while it runs
  ledger::Micros rate = 0;  // per GPU-hour
  ledger::Micros cost = 0;  // charged so far
};
// What a provider earned from one attempt on one of its nodes.
struct EarningLine {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  std::string node_id;
  int64_t started_at = 0;
  int64_t finished_at = 0;  // 0 while it runs
  int64_t gpu_ms = 0;
  ledger::Micros rate = 0;
  ledger::Micros gross = 0;
  ledger::Micros fee = 0;
  ledger::Micros earned = 0;
};
struct JobMoney {
  ledger::Micros cost = 0;    // charged so far, all attempts
  ledger::Micros escrow = 0;  // still held
};

// A fresh compute card code, from the CSPRNG.
std::string NewCardCode();

class Accounts {
 public:
  Accounts(Clock* clock, ledger::Micros default_job_cap)
      : clock_(clock), default_job_cap_(default_job_cap) {}

  // Replays the ledger, cards, prices and caps. Exits the process if the
  // ledger does not replay or balance: that is nothing to run on.
  void Recover(const store::Contents& contents, const JobState& jobs);
  // The transactions applied since the last call, for the batch being built.
  void TakeRows(std::vector<store::LedgerRow>& out);

  // --- rates and worst cases ---
  // Rate of `node`'s GPU `gpu` for a job of `spec`'s tier.
  ledger::Micros Rate(const api::Node& node, int gpu, const api::JobSpec& spec) const;
  // Highest rate of a GPU `spec` may run on (the admission worst case).
  ledger::Micros MaxRate(const api::JobSpec& spec, const JobState& jobs) const;
  ledger::Limits LimitsOf(const api::JobSpec& spec) const;
  // What a job may cost at most: held in escrow while it lives.
  ledger::Micros WorstCase(const api::JobSpec& spec, ledger::Micros rate) const;
  // What one attempt of `spec` at `rate` may cost at most (without retries).
  ledger::Micros AttemptCap(const api::JobSpec& spec, ledger::Micros rate) const;
  // What the running attempt of `e` may still cost, at most.
  ledger::Micros AttemptReserve(const JobEntry& e) const;

  // --- admit ---
  // Moves `hold` from `owner` into the escrow of `escrow_id` (a job or a
  // batch), or refuses: not enough credit (saying `what` it is and
  // `because` of what it may cost that much, and the `remedy`), or the
  // owner's daily cap.
  Status Admit(const std::string& owner, const std::string& escrow_id, ledger::Micros hold,
               const std::string& what, const std::string& because, const std::string& remedy);

  // A job about to be placed at `rate` (its dearest node's): if nodes
  // dearer than any at its submission joined since, the escrow grows to
  // the worst case at that rate, or the placement is refused with the
  // numbers (`where` names the node). Trials are bounded by their batch's
  // gate instead.
  Status EnsureHeld(const JobEntry& e, ledger::Micros rate, const std::string& where);

  // --- meter ---
  // Charges each started rank of the job's current attempt up to `until`
  // (and never past a lost node's last heartbeat).
  void Meter(const JobEntry& e, int64_t until, const JobState& jobs);
  // Meters every running job; returns those whose budget, batch budget or
  // owner's daily cap cannot pay for their grace period (they must stop).
  std::vector<std::string> MeterAll(const JobState& jobs,
                                    const std::function<bool(const std::string&)>& batch_has_budget);

  // --- release ---
  // What the escrow of `escrow_id` still holds returns to `owner`.
  void Release(const std::string& escrow_id, const std::string& owner);
  // The escrow account a job's charges come from: its own, or its batch's.
  static std::string EscrowOf(const api::Job& job);
  ledger::Micros EscrowBalance(const std::string& escrow_id) const;

  // --- cards, prices, caps ---
  Result<ledger::Micros> Redeem(const std::string& user, const std::string& code,
                                store::WriteBatch& batch);
  Status Mint(const std::vector<std::string>& codes, ledger::Micros value, int64_t expires_at,
              store::WriteBatch& batch);
  void SetPrices(const ledger::PriceList& prices, store::WriteBatch& batch);
  const ledger::PriceList& prices() const { return prices_; }
  void SetDailyCap(const std::string& user, ledger::Micros cap, store::WriteBatch& batch);
  ledger::Micros DailyCap(const std::string& user) const;

  // --- views ---
  // What `user`'s jobs were charged since UTC midnight of `now`.
  ledger::Micros SpentToday(const std::string& user, int64_t now) const;
  BalanceInfo Balance(const std::string& user) const;
  JobMoney MoneyOf(const std::string& job_id) const;
  // Charged to the job so far: all attempts, or only `only` (one of them).
  ledger::Micros Charged(const api::Job& job, const api::Attempt* only = nullptr) const;
  // `visible` says which jobs the caller may see.
  std::vector<UsageLine> Usage(const JobState& jobs, const std::function<bool(const api::Job&)>& visible,
                               int64_t since) const;
  // Attempts on the provider `provider`'s nodes ("" = every provider).
  std::vector<EarningLine> Earnings(const JobState& jobs, const std::string& provider) const;
  ledger::Totals Totals() const { return ledger_.Summary(); }
  int64_t LastSeq() const { return ledger_.last_seq(); }
  Status Check() const { return ledger_.Check(); }

 private:
  struct Card {
    ledger::Micros value = 0;
    int64_t expires_at = 0;  // unix ms; 0 = never
    int64_t created_at = 0;
    std::string redeemed_by;
    int64_t redeemed_at = 0;
  };
  // Charged so far per "job#attempt#rank": the cost and its fee part.
  struct ChargedPiece {
    ledger::Micros gross = 0;
    ledger::Micros fee = 0;
  };
  struct DaySpend {
    int64_t day = -1;  // days since the epoch, UTC
    ledger::Micros spent = 0;
  };

  // Applies `tx` to the ledger and queues its row.
  Status Apply(ledger::Transaction tx);
  // What the current attempt may still be charged: the escrow's balance,
  // for a trial also bounded by its attempt's cap and its own max_cost.
  ledger::Micros Spendable(const JobEntry& e) const;
  void NoteSpent(const std::string& user, int64_t at, ledger::Micros amount);
  // What `user`'s live jobs and batches still hold in escrow.
  ledger::Micros Held(const std::string& user) const;
  static std::string CardDoc(const Card& c);

  Clock* clock_;
  const ledger::Micros default_job_cap_;
  ledger::Ledger ledger_;
  std::vector<store::LedgerRow> rows_;
  ledger::PriceList prices_;
  std::unordered_map<std::string, Card> cards_;  // by hash
  std::unordered_map<std::string, ChargedPiece> charged_;
  std::unordered_map<std::string, ledger::Micros> daily_caps_;  // by user id
  std::unordered_map<std::string, DaySpend> spent_today_;       // by user id
  // The escrow accounts each user holds money in (jobs' and batches').
  std::unordered_map<std::string, std::set<std::string>> escrows_;
};

}  // namespace tide::server
