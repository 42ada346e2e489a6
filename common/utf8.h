// UTF-8 validity: what JSON text may hold. Text from files and scripts that
// becomes a job spec is checked, so that a stray byte is a clear error
// naming its place, not a failure when the spec is written as JSON.
#pragma once

#include <cstddef>
#include <string_view>

namespace tide {

// True if `text` is well-formed UTF-8 (no overlong forms, surrogates or
// code points past U+10FFFF). Otherwise false, and *bad is the offset of
// the first byte that is not.
bool ValidUtf8(std::string_view text, size_t* bad = nullptr);

}  // namespace tide
