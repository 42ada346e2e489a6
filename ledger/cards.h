// Compute cards: prepaid credit as bearer codes.
//
// A code carries 130 random bits (from the CSPRNG of the caller) as 26 Crockford base32
// characters (no I, L, O, U: nothing to misread), then two check
// characters (10 bits of a SHA-256 of the rest), shown in groups of four:
//   TIDE-7K2M-Q9XH-3VAB-...
// Reading is forgiving the way people type: case, spaces and dashes do not
// matter, O reads as 0 and I or L as 1. A typo fails the check and is
// reported as such, never looked up. Only the SHA-256 of the canonical form
// is stored.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace tide::ledger {

// How much randomness a code carries: kCardRandomBytes bytes as hex, of
// which 5 bits a byte are used.
inline constexpr size_t kCardRandomBytes = 26;
// The code of `random_hex` (2 * kCardRandomBytes hex digits from a
// CSPRNG, which the caller draws: this module draws nothing), formatted
// for people.
// "" if `random_hex` is too short.
std::string CardCodeFrom(std::string_view random_hex);
// The 28 canonical characters of a code as typed, or an error saying why it
// is not one (wrong length, a character outside the alphabet, the check).
Result<std::string> CanonicalCardCode(std::string_view typed);
// What the store keeps of a code.
std::string CardHash(const std::string& canonical);

}  // namespace tide::ledger
