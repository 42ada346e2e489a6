// Packing a directory as a job's code (code.h).
#include "cli/code.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>

#include "api/types.h"
#include "cli/common.h"
#include "common/archive.h"
#include "common/paths.h"

namespace tide::cli {
namespace fs = std::filesystem;

namespace {

// Matches pattern[p..] against text[t..].
bool Match(const std::string& pat, size_t p, const std::string& text, size_t t) {
  while (p < pat.size()) {
    const char c = pat[p];
    if (c == '*' && p + 1 < pat.size() && pat[p + 1] == '*' && (p == 0 || pat[p - 1] == '/')) {
      size_t rest = p + 2;
      if (rest < pat.size() && pat[rest] == '/') {
        // "**/": zero or more whole directories.
        if (Match(pat, rest + 1, text, t)) return true;
        for (size_t s = t; s < text.size(); ++s) {
          if (text[s] == '/' && Match(pat, rest + 1, text, s + 1)) return true;
        }
        return false;
      }
      if (rest == pat.size()) return true;  // "/**": everything below
      ++p;                                  // "**x" is "*x"
      continue;
    }
    if (c == '*') {
      for (size_t s = t;; ++s) {
        if (Match(pat, p + 1, text, s)) return true;
        if (s >= text.size() || text[s] == '/') return false;
      }
    }
    if (t >= text.size()) return false;
    if (c == '?') {
      if (text[t] == '/') return false;
    } else if (c == '[') {
      size_t q = p + 1;
      bool negate = q < pat.size() && (pat[q] == '!' || pat[q] == '^');
      if (negate) ++q;
      bool found = false;
      size_t first = q;
      for (; q < pat.size() && (pat[q] != ']' || q == first); ++q) {
        char lo = pat[q];
        if (lo == '\\' && q + 1 < pat.size()) lo = pat[++q];
        char hi = lo;
        if (q + 2 < pat.size() && pat[q + 1] == '-' && pat[q + 2] != ']') {
          hi = pat[q + 2];
          q += 2;
        }
        if (text[t] >= lo && text[t] <= hi) found = true;
      }
      if (q >= pat.size()) {  // no closing bracket: a literal '['
        if (text[t] != '[') return false;
      } else {
        if (found == negate || text[t] == '/') return false;
        p = q;
      }
    } else {
      char want = c;
      if (c == '\\' && p + 1 < pat.size()) want = pat[++p];
      if (text[t] != want) return false;
    }
    ++p;
    ++t;
  }
  return t == text.size();
}

// A line's trailing spaces go unless escaped ("a\ ").
std::string TrimLine(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  while (!line.empty() && line.back() == ' ' &&
         !(line.size() >= 2 && line[line.size() - 2] == '\\')) {
    line.pop_back();
  }
  return line;
}

}  // namespace

bool GlobMatch(const std::string& pattern, const std::string& text) {
  return Match(pattern, 0, text, 0);
}

void IgnoreRules::Add(const std::string& text, const std::string& base) {
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string line =
        TrimLine(text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    pos = nl == std::string::npos ? text.size() + 1 : nl + 1;
    if (line.empty() || line[0] == '#') continue;
    Rule r;
    r.base = base;
    if (line[0] == '!') {
      r.negate = true;
      line = line.substr(1);
    } else if (line[0] == '\\' && line.size() > 1 && (line[1] == '!' || line[1] == '#')) {
      line = line.substr(1);
    }
    if (!line.empty() && line.back() == '/') {
      r.dir_only = true;
      line.pop_back();
    }
    if (line.find('/') != std::string::npos) {
      r.anchored = true;
      if (line[0] == '/') line = line.substr(1);
    }
    if (line.empty()) continue;
    r.pattern = line;
    rules_.push_back(std::move(r));
  }
}

bool IgnoreRules::Ignored(const std::string& rel, bool is_dir) const {
  const size_t slash = rel.rfind('/');
  const std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
  for (auto it = rules_.rbegin(); it != rules_.rend(); ++it) {
    const Rule& r = *it;
    if (r.dir_only && !is_dir) continue;
    std::string below = rel;
    if (!r.base.empty()) {
      if (rel.compare(0, r.base.size() + 1, r.base + "/") != 0) continue;
      below = rel.substr(r.base.size() + 1);
    }
    if (GlobMatch(r.pattern, r.anchored ? below : name)) return !r.negate;
  }
  return false;
}

std::function<bool(const std::string& rel, bool is_dir)> CodeExcluder(const std::string& dir) {
  auto rules = std::make_shared<IgnoreRules>();
  auto load = [rules, dir](const std::string& rel) {
    const std::string file = dir + "/" + (rel.empty() ? "" : rel + "/") + ".gitignore";
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) return;
    auto text = ReadFile(file);
    if (text.ok()) rules->Add(*text, rel);
  };
  load("");
  return [rules, load](const std::string& rel, bool is_dir) {
    const size_t slash = rel.rfind('/');
    const std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
    if (name == ".git" || rel == ".tide") return true;
    if (rules->Ignored(rel, is_dir)) return true;
    // The walk enters this directory next: its own .gitignore applies below.
    if (is_dir) load(rel);
    return false;
  };
}

namespace {

// Sums what a walk of `dir` would pack; stops counting once far past the
// limit, so a home directory is not read to its end.
struct Tally {
  int64_t bytes = 0;
  int64_t files = 0;
  bool stopped = false;
  std::map<std::string, int64_t> by_top;  // "data/" or "model.bin" -> bytes
};

Tally Measure(const std::string& dir, int64_t limit) {
  Tally t;
  auto exclude = CodeExcluder(dir);
  std::error_code ec;
  const ArchiveLimits archive_limits;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (limit == INT64_MAX && t.files > archive_limits.max_entries) break;
    const fs::file_status st = it->symlink_status();
    const bool is_dir = fs::is_directory(st);
    const std::string rel = it->path().lexically_relative(dir).generic_string();
    if (exclude(rel, is_dir)) {
      if (is_dir) it.disable_recursion_pending();
      continue;
    }
    if (!fs::is_regular_file(st)) continue;
    struct stat sb {};
    if (::lstat(it->path().c_str(), &sb) != 0) continue;
    ++t.files;
    t.bytes += sb.st_size;
    const size_t slash = rel.find('/');
    t.by_top[slash == std::string::npos ? rel : rel.substr(0, slash + 1)] += sb.st_size;
    if (t.bytes > limit && (t.bytes / 4 > limit || t.files > archive_limits.max_entries)) {
      t.stopped = true;
      break;
    }
  }
  return t;
}

}  // namespace

Result<PackedCode> PackCode(const std::string& dir, const CodeOptions& options) {
  std::string root = dir;
  std::string empty_dir;
  if (root.empty()) {
    char tmpl[] = "/tmp/tide-code-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return Status::Internal("mkdtemp failed");
    root = empty_dir = tmpl;
  }
  struct RemoveEmpty {
    std::string dir;
    ~RemoveEmpty() {
      std::error_code ec;
      if (!dir.empty()) fs::remove_all(dir, ec);
    }
  } remove_empty{empty_dir};
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return Status::InvalidArgument(dir + " is not a directory");

  PackedCode packed;
  {
    Tally t = Measure(root, options.max_bytes);
    packed.bytes = t.bytes;
    packed.files = t.files;
    if (t.bytes > options.max_bytes) {
      std::vector<std::pair<int64_t, std::string>> big;
      for (const auto& [name, bytes] : t.by_top) big.emplace_back(bytes, name);
      std::sort(big.rbegin(), big.rend());
      std::string largest;
      for (size_t i = 0; i < big.size() && i < 3; ++i) {
        largest += (i ? ", " : "") + big[i].second + " " + FormatBytes(big[i].first);
      }
      return Status::TooLarge(dir + " holds " + (t.stopped ? "more than " : "") +
                              FormatBytes(t.bytes) +
                              " to upload (leaving out .git and what "
                              ".gitignore names), more than the limit of " +
                              FormatBytes(options.max_bytes) + "; the largest: " + largest);
    }
  }
  PackOptions pack;
  pack.exclude = CodeExcluder(root);
  pack.extra_files = options.extra_files;
  pack.skip_other_files = options.skip_other_files;
  pack.skipped = &packed.skipped;
  pack.max_bytes = static_cast<int64_t>(api::kMaxUploadBody);  // what the server takes
  auto archive = PackDirectory(root, pack);
  if (!archive.ok()) return archive.status();
  packed.archive = std::move(*archive);
  return packed;
}

}  // namespace tide::cli
