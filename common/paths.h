// Relative paths from clients (output names, archive members): checked so
// they can never escape the directory they are joined to.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace tide {

// Accepts "a/b.txt"; rejects "", absolute paths, "..", empty or "." segments
// that would hide a traversal, backslashes, NUL and control characters, and
// paths longer than 1024 bytes. Returns the normalised path ("./a//b" -> "a/b").
Result<std::string> CleanRelativePath(std::string_view path);

// Writes `data` to `path` atomically: a temporary file in the same directory,
// fsync, rename. Creates missing parent directories. `mode` is the file mode.
Status WriteFileAtomic(const std::string& path, std::string_view data, int mode = 0644);

Result<std::string> ReadFile(const std::string& path);

}  // namespace tide
