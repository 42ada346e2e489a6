// Code archive unpacking (common/archive.h), what the server checks on
// upload and the agent unpacks into a job's work directory: whatever the
// bytes, nothing is written outside the destination, nothing but regular
// files and directories is written, and a refused archive leaves nothing.
#include <stdlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "common/archive.h"
#include "fuzz/check.h"

namespace fs = std::filesystem;
using tide::fuzz::Check;

namespace {

const fs::path& Root() {
  static const fs::path root = [] {
    std::string tmpl = (fs::temp_directory_path() / "tide-archive-fuzz-XXXXXX").string();
    Check(mkdtemp(tmpl.data()) != nullptr, "mkdtemp");
    // Removed at exit; a plain pointer, so that it outlives every static.
    static const char* dir = strdup(tmpl.c_str());
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(dir, ec);
    });
    return fs::path(tmpl);
  }();
  return root;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string archive = tide::fuzz::Text(data, size);
  tide::ArchiveLimits limits;
  limits.max_unpacked_bytes = 8 << 20;
  limits.max_entries = 1000;
  fs::path dest = Root() / "dest";
  tide::Status valid = tide::ValidateArchive(archive, limits);
  tide::Status unpacked = tide::UnpackArchive(archive, dest.string(), limits);
  Check(valid.ok() == unpacked.ok(), "validation and unpacking disagree: " + valid.ToString() +
                                         " / " + unpacked.ToString());
  for (const auto& e : fs::directory_iterator(Root())) {
    Check(e.path() == dest, "written outside the destination: " + e.path().string());
  }
  if (!unpacked.ok()) {
    Check(!fs::exists(dest) || fs::is_empty(dest), "a refused archive left files behind");
  } else {
    for (const auto& e : fs::recursive_directory_iterator(dest)) {
      auto st = e.symlink_status();
      Check(fs::is_regular_file(st) || fs::is_directory(st),
            "unpacked something that is not a file or directory: " + e.path().string());
    }
  }
  std::error_code ec;
  fs::remove_all(dest, ec);
  return 0;
}
