#include "ledger/cards.h"

#include <cctype>

#include "common/token.h"

namespace tide::ledger {

namespace {
constexpr char kAlphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
constexpr size_t kPayload = 26;
constexpr size_t kCheck = 2;

std::string CheckChars(std::string_view payload) {
  std::string hex = Sha256Hex(std::string("tide-card:") + std::string(payload));
  int bits = std::stoi(hex.substr(0, 3), nullptr, 16) >> 2;  // 10 bits
  return {kAlphabet[(bits >> 5) & 31], kAlphabet[bits & 31]};
}

// Crockford's reading of one typed character; 0 for one outside it.
char Decode(char c) {
  c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (c == 'O') return '0';
  if (c == 'I' || c == 'L') return '1';
  for (const char* a = kAlphabet; *a; ++a) {
    if (*a == c) return c;
  }
  return 0;
}
}  // namespace

std::string CardCodeFrom(std::string_view hex) {
  static_assert(kPayload == kCardRandomBytes);
  if (hex.size() < 2 * kPayload) return "";
  std::string payload;
  for (size_t i = 0; i < kPayload; ++i) {
    int byte = std::stoi(std::string(hex.substr(2 * i, 2)), nullptr, 16);
    payload += kAlphabet[byte & 31];
  }
  std::string code = payload + CheckChars(payload);
  std::string out = "TIDE";
  for (size_t i = 0; i < code.size(); i += 4) out += "-" + code.substr(i, 4);
  return out;
}

Result<std::string> CanonicalCardCode(std::string_view typed) {
  std::string s;
  for (char c : typed) {
    if (c == '-' || c == ' ' || c == '\t') continue;
    s += c;
  }
  if (s.size() >= 4) {
    std::string head = s.substr(0, 4);
    for (auto& c : head) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (head == "TIDE" && s.size() == 4 + kPayload + kCheck) s = s.substr(4);
  }
  if (s.size() != kPayload + kCheck) {
    return Status::InvalidArgument("is not a card code: it has " + std::to_string(s.size()) +
                                       " characters, a code has " +
                                       std::to_string(kPayload + kCheck) + " after TIDE-",
                                   "code");
  }
  std::string canonical;
  for (char c : s) {
    char d = Decode(c);
    if (d == 0) {
      return Status::InvalidArgument(std::string("is not a card code: '") + c +
                                         "' is not one of its characters",
                                     "code");
    }
    canonical += d;
  }
  if (CheckChars(canonical.substr(0, kPayload)) != canonical.substr(kPayload)) {
    return Status::InvalidArgument("is not a card code: a character is mistyped (the check fails)",
                                   "code");
  }
  return canonical;
}

std::string CardHash(const std::string& canonical) { return Sha256Hex("tide-card:" + canonical); }

}  // namespace tide::ledger
