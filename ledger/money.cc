#include "ledger/money.h"

#include <cctype>

#include "common/decimal.h"

namespace tide::ledger {

namespace {
// Fixed-point decimal with up to six fraction digits into millionths.
Result<int64_t> ParseMillionths(std::string_view text, const std::string& field, int64_t max,
                                const std::string& what) {
  auto bad = [&] {
    return Status::InvalidArgument("\"" + std::string(text) + "\" is not " + what, field);
  };
  if (text.empty()) return bad();
  size_t i = 0;
  __int128 whole = 0;
  bool digits = false;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    whole = whole * 10 + (text[i] - '0');
    digits = true;
    if (whole > max) return Status::InvalidArgument("is too large", field);
  }
  int64_t frac = 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    int places = 0;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      if (++places > 6) {
        return Status::InvalidArgument("has more than six decimals", field);
      }
      frac = frac * 10 + (text[i] - '0');
      digits = true;
    }
    if (places == 0) return bad();
    for (; places < 6; ++places) frac *= 10;
  }
  if (!digits || i != text.size()) return bad();
  __int128 total = whole * kPpm + frac;
  if (total > static_cast<__int128>(max) * kPpm) return Status::InvalidArgument("is too large", field);
  return static_cast<int64_t>(total);
}

}  // namespace

Result<Micros> ParseCredits(std::string_view text, const std::string& field) {
  return ParseMillionths(text, field, kMaxAmount / kMicrosPerCredit,
                         "an amount of credits (like 12.5)");
}

Result<int64_t> ParseFraction(std::string_view text, const std::string& field) {
  auto v = ParseMillionths(text, field, 1, "a fraction between 0 and 1 (like 0.1)");
  if (!v.ok()) return v;
  if (*v > kPpm) return Status::InvalidArgument("must be between 0 and 1", field);
  return v;
}

std::string FormatFraction(int64_t ppm) { return FormatMillionths(ppm); }

Micros CostOf(Micros rate, int64_t gpu_ms) {
  if (rate <= 0 || gpu_ms <= 0) return 0;
  return static_cast<Micros>(static_cast<__int128>(rate) * gpu_ms / 3'600'000);
}

Micros PartOf(Micros amount, int64_t ppm) {
  if (amount <= 0 || ppm <= 0) return 0;
  return static_cast<Micros>(static_cast<__int128>(amount) * ppm / kPpm);
}

}  // namespace tide::ledger
