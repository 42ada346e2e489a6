// What the fuzz targets share: a check that stops the run (libFuzzer then
// keeps the input as a crash), and the input as text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tide::fuzz {

// A property that must hold for every input; a failure aborts, which
// libFuzzer reports as a crash and saves the input that caused it.
inline void Check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz check failed: %s\n", what.c_str());
  std::abort();
}

inline std::string Text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace tide::fuzz
