// Amounts of credit: int64 micro-credits, never floating point.
//
// One credit is 1,000,000 micro-credits. Prices are micro-credits per
// GPU-hour; fractions (the platform fee, the spot discount) are parts per
// million. Every rounding is down, to whole micro-credits, and done once
// per computation on the exact integer product, so charging a running
// attempt in many small steps adds up to the same total as one step.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/decimal.h"
#include "common/status.h"

namespace tide::ledger {

using Micros = int64_t;
inline constexpr Micros kMicrosPerCredit = 1'000'000;
inline constexpr int64_t kPpm = 1'000'000;
// Largest amount accepted from users: 10^12 credits.
inline constexpr Micros kMaxAmount = Micros{1'000'000'000'000} * kMicrosPerCredit;

// 12500000 -> "12.5", 1 -> "0.000001", -2000000 -> "-2". Up to six
// decimals (common/decimal.h, which clients use too).
using ::tide::FormatCredits;

// "12.5", "12", "0.000001" -> micro-credits. At most six decimals, not
// negative, at most kMaxAmount. `field` names the input in errors.
Result<Micros> ParseCredits(std::string_view text, const std::string& field);
// The same for a fraction between 0 and 1 ("0.1" -> 100000 ppm).
Result<int64_t> ParseFraction(std::string_view text, const std::string& field);
std::string FormatFraction(int64_t ppm);

// Cost of `gpu_ms` GPU-milliseconds at `rate` micro-credits per GPU-hour,
// rounded down.
Micros CostOf(Micros rate, int64_t gpu_ms);
// `ppm` parts per million of `amount`, rounded down.
Micros PartOf(Micros amount, int64_t ppm);

}  // namespace tide::ledger
