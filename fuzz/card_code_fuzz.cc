// Card codes (ledger/cards.h), what `tide redeem CODE` takes as typed: any
// text is refused or read to a canonical code that reads to itself, and a
// code made from random bits always reads back.
#include <string>

#include "fuzz/check.h"
#include "ledger/cards.h"

using tide::fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string typed = tide::fuzz::Text(data, size);
  auto canonical = tide::ledger::CanonicalCardCode(typed);
  if (canonical.ok()) {
    auto again = tide::ledger::CanonicalCardCode(*canonical);
    Check(again.ok() && *again == *canonical, "a canonical code does not read to itself: " +
                                                  *canonical);
    Check(!tide::ledger::CardHash(*canonical).empty(), "an empty hash");
  }
  // The input's bytes as the random part of a new code.
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (size_t i = 0; i < 2 * tide::ledger::kCardRandomBytes; ++i) {
    uint8_t b = i / 2 < size ? data[i / 2] : 0;
    hex += kHex[i % 2 == 0 ? b >> 4 : b & 15];
  }
  std::string code = tide::ledger::CardCodeFrom(hex);
  auto read = tide::ledger::CanonicalCardCode(code);
  Check(read.ok(), "a new code is refused: " + code);
  return 0;
}
