#include "common/decimal.h"

namespace tide {

std::string FormatMillionths(int64_t v) {
  constexpr uint64_t kMillion = 1'000'000;
  std::string sign = v < 0 ? "-" : "";
  uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  std::string out = sign + std::to_string(u / kMillion);
  uint64_t frac = u % kMillion;
  if (frac == 0) return out;
  std::string digits = std::to_string(frac);
  digits = std::string(6 - digits.size(), '0') + digits;
  while (!digits.empty() && digits.back() == '0') digits.pop_back();
  return out + "." + digits;
}

}  // namespace tide
