// Durations as users write them: "90", "90s", "30m", "2h", "1h30m", "1d".
// A bare number means seconds. Fractions, signs and unknown units are errors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tide {

// Parses into whole seconds. Zero is allowed ("0s"); callers that need a
// positive duration check it themselves.
Result<int64_t> ParseDurationSeconds(std::string_view text);

// Inverse for display: 5400 -> "1h30m", 45 -> "45s", 0 -> "0s".
std::string FormatDurationSeconds(int64_t seconds);

}  // namespace tide
