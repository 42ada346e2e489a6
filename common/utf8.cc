#include "common/utf8.h"

#include <cstdint>

namespace tide {

bool ValidUtf8(std::string_view text, size_t* bad) {
  size_t i = 0;
  const size_t n = text.size();
  auto fail = [&] {
    if (bad != nullptr) *bad = i;
    return false;
  };
  while (i < n) {
    const auto c = static_cast<uint8_t>(text[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return fail();
    }
    if (i + len > n) return fail();
    for (size_t k = 1; k < len; ++k) {
      const auto cont = static_cast<uint8_t>(text[i + k]);
      if ((cont & 0xC0) != 0x80) return fail();
      cp = (cp << 6) | (cont & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return fail();
    i += len;
  }
  return true;
}

}  // namespace tide
