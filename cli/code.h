// A directory as a job's code: what `tide submit --code`, `tide batch
// submit --code` and `tide sbatch` upload. One packing for all of them:
// `.git` (at any depth) and a top-level `.tide/` (the data of `tide dev`)
// are always left out, and so is whatever the directory's `.gitignore`
// files name, read as git reads them. The archive itself is a code
// archive of common/archive.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tide::cli {

// The patterns of `.gitignore` files: blank lines and `#` comments are
// skipped, `!` re-includes, a trailing `/` matches only directories, a
// pattern with a `/` elsewhere is anchored at its file's directory (else it
// matches a name at any depth), `*`, `?`, `[a-z]` and `**` are git's. The
// last pattern that matches decides. Thread safety: none.
class IgnoreRules {
 public:
  // Adds the lines of the .gitignore of the directory `base` ("" for the
  // top, "src/lib" below it).
  void Add(const std::string& text, const std::string& base = "");
  // Whether `rel` ("src/a.py"; a directory when `is_dir`) is ignored. A
  // directory's contents are not asked about once it is (as in git, a file
  // in an ignored directory cannot be re-included).
  bool Ignored(const std::string& rel, bool is_dir) const;

 private:
  struct Rule {
    std::string base;     // directory of the .gitignore, "" at the top
    std::string pattern;  // without `!`, the leading and the trailing `/`
    bool negate = false;
    bool dir_only = false;
    bool anchored = false;  // matches the path below `base`, not a name
  };
  std::vector<Rule> rules_;
};

// Whether `text` matches the glob `pattern`: `*` and `?` never match `/`,
// `**` as a whole component matches any number of directories, `[...]`
// classes (`!` or `^` negates), `\` escapes.
bool GlobMatch(const std::string& pattern, const std::string& text);

// What is left out of a code directory: .git, the top-level .tide, and
// what its .gitignore files (read from disk as the walk enters each
// directory) name. Returns a fresh predicate for one walk of `dir`.
std::function<bool(const std::string& rel, bool is_dir)> CodeExcluder(const std::string& dir);

struct CodeOptions {
  // Refuse a directory that holds more than this many bytes to upload
  // (kTooLarge, naming the size, the limit and the biggest entries).
  int64_t max_bytes = INT64_MAX;
  // Leave out symlinks and special files (listed in PackedCode::skipped)
  // instead of refusing them.
  bool skip_other_files = false;
  // Files to add (path below the directory, content), mode 0755.
  std::vector<std::pair<std::string, std::string>> extra_files;
};

struct PackedCode {
  std::string archive;  // .tar.gz
  int64_t bytes = 0;    // what it unpacks to
  int64_t files = 0;
  std::vector<std::string> skipped;  // links and special files left out
};

// Packs `dir` (which may be "") as a job's code; with dir "" only the
// extra files.
Result<PackedCode> PackCode(const std::string& dir, const CodeOptions& options = {});

}  // namespace tide::cli
