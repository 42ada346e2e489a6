// Fixed-point amounts as text: values in millionths (micro-credits, parts
// per million) printed as decimals, for the ledger and for clients that
// show credits.
#pragma once

#include <cstdint>
#include <string>

namespace tide {

// 12500000 -> "12.5", 1 -> "0.000001", -2000000 -> "-2": up to six
// decimals, trailing zeros dropped.
std::string FormatMillionths(int64_t value);

// An amount of micro-credits as credits: FormatMillionths.
inline std::string FormatCredits(int64_t micros) { return FormatMillionths(micros); }

}  // namespace tide
