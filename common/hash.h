// FNV-1a, 64 bits: a fast, stable hash for spreading and tie-breaking
// (never for security). The same input and seed hash the same on every
// machine and in every release, so plans that use it stay deterministic.
#pragma once

#include <cstdint>
#include <string_view>

namespace tide {

inline uint64_t Fnv1a(uint64_t seed, std::string_view s) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace tide
