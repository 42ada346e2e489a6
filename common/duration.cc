#include "common/duration.h"

#include <cctype>
#include <limits>

namespace tide {

Result<int64_t> ParseDurationSeconds(std::string_view text) {
  if (text.empty()) return Status::InvalidArgument("empty duration");
  const std::string shown = "\"" + std::string(text) + "\"";
  int64_t total = 0;
  size_t i = 0;
  bool any_unit = false;
  while (i < text.size()) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) {
      return Status::InvalidArgument("bad duration " + shown +
                                     ": expected a number like 90s, 30m, 2h or 1h30m");
    }
    int64_t n = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      if (n > std::numeric_limits<int64_t>::max() / 10 - 10) {
        return Status::InvalidArgument("duration " + shown + " is too large");
      }
      n = n * 10 + (text[i] - '0');
      ++i;
    }
    int64_t unit = 0;
    if (i == text.size()) {
      if (any_unit) return Status::InvalidArgument("bad duration " + shown + ": missing unit");
      unit = 1;  // bare number: seconds
    } else {
      switch (text[i]) {
        case 's': unit = 1; break;
        case 'm': unit = 60; break;
        case 'h': unit = 3600; break;
        case 'd': unit = 86400; break;
        default:
          return Status::InvalidArgument("bad duration " + shown + ": unknown unit '" +
                                         std::string(1, text[i]) + "' (use s, m, h or d)");
      }
      ++i;
      any_unit = true;
    }
    if (n > (std::numeric_limits<int64_t>::max() - total) / unit / 2) {
      return Status::InvalidArgument("duration " + shown + " is too large");
    }
    total += n * unit;
  }
  return total;
}

std::string FormatDurationSeconds(int64_t seconds) {
  if (seconds <= 0) return "0s";
  std::string out;
  int64_t d = seconds / 86400, h = seconds % 86400 / 3600, m = seconds % 3600 / 60,
          s = seconds % 60;
  if (d) out += std::to_string(d) + "d";
  if (h) out += std::to_string(h) + "h";
  if (m) out += std::to_string(m) + "m";
  if (s) out += std::to_string(s) + "s";
  return out;
}

}  // namespace tide
