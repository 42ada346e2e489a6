// Secrets: random tokens and ids, their SHA-256 hashes, constant-time compare.
//
// Tokens carry 256 random bits from OpenSSL's CSPRNG and a prefix naming
// their kind ("tide_u_" user, "tide_a_" admin, "tide_j_" join, "tide_n_"
// node). Only the SHA-256 hex of a token is ever stored.
#pragma once

#include <string>
#include <string_view>

namespace tide {

// `nbytes` random bytes from the CSPRNG, hex encoded. Aborts if the CSPRNG
// fails (there is no safe fallback).
std::string RandomHex(size_t nbytes);

// prefix + 64 hex characters (256 bits).
std::string NewToken(std::string_view prefix);

// Short random identifier: prefix + 12 hex characters ("j-3f9a0c1d2e4b").
std::string NewId(std::string_view prefix);

std::string Sha256Hex(std::string_view data);

// A token's public id: "jt-" and the first 12 hex characters of its SHA-256
// for a join token ("ut-" user, "at-" admin, "nt-" node). Safe to print and
// log; it names the token without revealing it.
std::string TokenId(std::string_view token);

// Compares without leaking where the first difference is.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace tide
