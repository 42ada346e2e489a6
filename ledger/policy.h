// Money policy, as pure functions: what a job may cost at most (its hold),
// what one attempt may cost, what a running piece is due and how a charge
// splits into the provider's and the platform's part, and the daily cap.
//
// The server's accounts room (server/accounts.h) applies these to its
// ledger; nothing here reads a clock, a store or a job record, so each
// rule is tested on its own numbers (policy_test.cc).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "ledger/money.h"
#include "ledger/prices.h"

namespace tide::ledger {

// What bounds the cost of a job, from its spec.
struct Limits {
  int64_t gpus = 0;           // over all its nodes
  int64_t max_runtime_s = 0;  // 0 = none
  int64_t grace_s = 0;        // the notice after max_runtime
  int retry_times = 0;        // each retry may cost as much again
  Micros max_cost = 0;        // 0 = none
};

// The most a job of `limits` may cost at `rate` per GPU-hour, retries
// included: held in escrow while it lives. With neither max_runtime nor
// max_cost it is `default_cap`; with both, the smaller. 0 when it is free.
Micros WorstCase(const Limits& limits, Micros rate, Micros default_cap);
// The same for one attempt (no retries).
Micros AttemptCap(const Limits& limits, Micros rate, Micros default_cap);

// One piece of a running attempt (a single-node attempt, or one rank of a
// gang) to be charged up to now.
struct PieceCharge {
  Micros due = 0;       // to take from the escrow now; 0 = nothing
  Split split;          // what of `due` goes to the provider and platform
};
// `gpu_ms` GPU-milliseconds ran at `rate`; `charged` and `fee_charged`
// were taken before (the running totals of this piece); at most
// `spendable` may be taken. Cost and fee are taken of the running total,
// so many small charges round to what one charge would.
PieceCharge ChargePiece(const PriceList& prices, Micros rate, int64_t gpu_ms, Micros charged,
                        Micros fee_charged, Micros spendable);

// The daily cap of an account: `spent` today and `held` for its live jobs
// and batches, plus a new hold of `hold`, must stay within `cap`. Ok, or
// InsufficientCredit with the numbers. A cap of 0 means none.
Status CheckDailyCap(Micros cap, Micros spent, Micros held, Micros hold);

// The refusal when `available` does not cover a hold of `hold`, saying
// what the hold is for (`what`: "the job", "the batch") and why it is that
// much (`because`), and what the user can do (`remedy`).
Status InsufficientFor(const std::string& what, Micros hold, const std::string& because,
                       Micros available, const std::string& remedy);

// Days since the epoch (UTC) of unix ms `at`: the day a daily cap counts in.
inline int64_t UtcDay(int64_t at_ms) { return at_ms / 86'400'000; }

}  // namespace tide::ledger
