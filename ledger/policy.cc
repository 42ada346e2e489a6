#include "ledger/policy.h"

#include <algorithm>

namespace tide::ledger {

Micros WorstCase(const Limits& limits, Micros rate, Micros default_cap) {
  if (rate <= 0) return 0;
  Micros cap = default_cap;
  if (limits.max_runtime_s > 0) {
    // It may run max_runtime, then the grace period of the timeout notice,
    // once and once more per retry.
    cap = CostOf(rate, limits.gpus * (limits.max_runtime_s + limits.grace_s) * 1000) *
          (1 + limits.retry_times);
  }
  if (limits.max_cost > 0) {
    cap = limits.max_runtime_s > 0 ? std::min(cap, limits.max_cost) : limits.max_cost;
  }
  return cap;
}

Micros AttemptCap(const Limits& limits, Micros rate, Micros default_cap) {
  Limits once = limits;
  once.retry_times = 0;
  return WorstCase(once, rate, default_cap);
}

PieceCharge ChargePiece(const PriceList& prices, Micros rate, int64_t gpu_ms, Micros charged,
                        Micros fee_charged, Micros spendable) {
  PieceCharge out;
  if (rate <= 0 || gpu_ms <= 0) return out;
  Micros due = std::min(CostOf(rate, gpu_ms) - charged, spendable);
  if (due <= 0) return out;
  out.due = due;
  out.split.platform =
      std::clamp<Micros>(SplitCharge(prices, charged + due).platform - fee_charged, 0, due);
  out.split.provider = due - out.split.platform;
  return out;
}

Status CheckDailyCap(Micros cap, Micros spent, Micros held, Micros hold) {
  if (cap <= 0 || spent + held + hold <= cap) return Status::Ok();
  return Status::InsufficientCredit(
      "the account's daily cap is " + FormatCredits(cap) + " credits: today " +
      FormatCredits(spent) + " were spent and " + FormatCredits(held) +
      " are held for running jobs, and this job may cost up to " + FormatCredits(hold));
}

Status InsufficientFor(const std::string& what, Micros hold, const std::string& because,
                       Micros available, const std::string& remedy) {
  return Status::InsufficientCredit(what + " may cost up to " + FormatCredits(hold) +
                                    " credits (" + because + "), but " +
                                    FormatCredits(available) +
                                    " are available; redeem a card (tide redeem CODE) or " +
                                    remedy);
}

}  // namespace tide::ledger
