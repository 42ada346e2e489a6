// Reading sbatch's options (sbatch_options.h).
#include "api/sbatch_options.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <set>

#include "api/batch.h"
#include "api/sbatch.h"
#include "common/utf8.h"

namespace tide::api::sbatch {

const std::map<std::string, OptInfo>& Options() {
  static const std::map<std::string, OptInfo> kOptions = {
      {"job-name", {'J', true}},      {"partition", {'p', true}},     {"gpus", {'G', true}},
      {"gres", {0, true}},            {"gpus-per-node", {0, true}},   {"nodes", {'N', true}},
      {"ntasks", {'n', true}},        {"ntasks-per-node", {0, true}}, {"cpus-per-task", {'c', true}},
      {"mem", {0, true}},             {"mem-per-cpu", {0, true}},     {"mem-per-gpu", {0, true}},
      {"time", {'t', true}},          {"output", {'o', true}},        {"error", {'e', true}},
      {"array", {'a', true}},         {"requeue", {0, false}},        {"no-requeue", {0, false}},
      {"signal", {0, true}},          {"dependency", {'d', true}},    {"account", {'A', true}},
      {"qos", {'q', true}},           {"mail-type", {0, true}},       {"mail-user", {0, true}},
      {"comment", {0, true}},         {"export", {0, true}},          {"chdir", {'D', true}},
      {"exclusive", {0, false}},      {"constraint", {'C', true}},    {"nodelist", {'w', true}},
      {"exclude", {'x', true}},       {"open-mode", {0, true}},       {"wait", {'W', false}},
      {"hold", {'H', false}},         {"begin", {'b', true}},         {"deadline", {0, true}},
      {"nice", {0, true}},            {"priority", {0, true}},        {"gpus-per-task", {0, true}},
      {"reservation", {0, true}},     {"licenses", {'L', true}},      {"wckey", {0, true}},
      {"hint", {0, true}},            {"cpu-bind", {0, true}},        {"distribution", {'m', true}},
      {"threads-per-core", {0, true}}, {"time-min", {0, true}},       {"parsable", {0, false}},
      {"quiet", {'Q', false}},        {"verbose", {'v', false}},      {"kill-on-invalid-dep", {0, true}},
      {"propagate", {0, true}},       {"get-user-env", {0, false}},   {"gpu-bind", {0, true}},
  };
  return kOptions;
}

std::string Where(const std::string& file, int line) {
  return line > 0 ? file + ":" + std::to_string(line) : "command line";
}

// Splits a directive or command-line words into options.
Status ReadOptions(const std::vector<std::string>& words, int line, const std::string& file,
                   std::vector<Opt>* out) {
  for (const std::string& w : words) {
    // What becomes the spec is sent as JSON text, which must be UTF-8.
    if (size_t bad = 0; !ValidUtf8(w, &bad)) {
      char byte[8];
      snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(w[bad]));
      return Status::InvalidArgument(Where(file, line) + ": not valid UTF-8 (byte " + byte + ")");
    }
  }
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    std::string name, value;
    bool has_value = false;
    if (w.size() < 2 || w[0] != '-') {
      return Status::InvalidArgument(Where(file, line) + ": \"" + w + "\" is not an sbatch option");
    }
    if (w.rfind("--", 0) == 0) {
      name = w.substr(2);
      size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
    } else if (w.size() >= 2 && w[0] == '-' && w[1] != '-') {
      auto it = std::find_if(Options().begin(), Options().end(),
                             [&](const auto& o) { return o.second.letter == w[1]; });
      if (it == Options().end()) {
        return Status::InvalidArgument(Where(file, line) + ": unknown sbatch option " + w.substr(0, 2));
      }
      name = it->first;
      if (w.size() > 2) {
        value = w.substr(2);
        if (!value.empty() && value[0] == '=') value = value.substr(1);
        has_value = true;
      }
    } else {
      return Status::InvalidArgument(Where(file, line) + ": \"" + w + "\" is not an sbatch option");
    }
    auto info = Options().find(name);
    if (info == Options().end()) {
      return Status::InvalidArgument(Where(file, line) + ": unknown sbatch option --" + name);
    }
    if (info->second.value && !has_value) {
      if (i + 1 >= words.size()) {
        return Status::InvalidArgument(Where(file, line) + ": --" + name + " needs a value");
      }
      value = words[++i];
    } else if (!info->second.value && has_value) {
      return Status::InvalidArgument(Where(file, line) + ": --" + name + " takes no value");
    }
    out->push_back({name, value, line});
  }
  return Status::Ok();
}

std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  char quote = 0;
  bool any = false;
  for (char c : text) {
    if (quote) {
      if (c == quote) quote = 0;
      else cur += c;
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
      any = true;
      continue;
    }
    if (c == '#' && cur.empty() && !any) break;  // a comment after the options
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (any || !cur.empty()) out.push_back(cur);
      cur.clear();
      any = false;
      continue;
    }
    cur += c;
  }
  if (any || !cur.empty()) out.push_back(cur);
  return out;
}

Result<int> PositiveInt(const std::string& text, const std::string& what) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(text) < 1) {
    return Status::InvalidArgument(what + ": \"" + text + "\" is not a positive number");
  }
  return std::stoi(text);
}

// Slurm sizes: a number with an optional K, M (default), G or T.
Result<int64_t> SlurmMemoryMb(const std::string& text, const std::string& what) {
  std::string digits = text;
  int64_t scale_kb = 1024;
  if (!digits.empty() && std::isalpha(static_cast<unsigned char>(digits.back()))) {
    char u = static_cast<char>(std::toupper(static_cast<unsigned char>(digits.back())));
    digits.pop_back();
    scale_kb = u == 'K' ? 1 : u == 'M' ? 1024 : u == 'G' ? 1024 * 1024 : u == 'T' ? 1024LL * 1024 * 1024 : -1;
  }
  if (scale_kb < 0 || digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return Status::InvalidArgument(what + ": \"" + text + "\" is not a size like 16G or 4000M");
  }
  int64_t mb = std::stoll(digits) * scale_kb / 1024;
  if (mb <= 0) return Status::InvalidArgument(what + ": must be at least 1M");
  return mb;
}

// A bash expression for a Slurm file name pattern, expanded when the job
// runs: literal parts single-quoted, replacements double-quoted.
Result<std::string> PatternExpression(const std::string& pattern, const std::string& what) {
  std::string out, literal;
  auto flush = [&] {
    if (literal.empty()) return;
    std::string q = "'";
    for (char c : literal) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += q + "'";
    literal.clear();
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      literal += pattern[i];
      continue;
    }
    size_t j = i + 1;
    while (j < pattern.size() && std::isdigit(static_cast<unsigned char>(pattern[j]))) ++j;  // %3a: padding
    if (j >= pattern.size()) return Status::InvalidArgument(what + ": a lone % at the end");
    const char c = pattern[j];
    i = j;
    std::string var;
    switch (c) {
      case '%': literal += '%'; continue;
      case 'j': var = "\"$SLURM_JOB_ID\""; break;
      case 'x': var = "\"$SLURM_JOB_NAME\""; break;
      case 'A': var = "\"${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}\""; break;
      case 'a': var = "\"${SLURM_ARRAY_TASK_ID:-4294967294}\""; break;
      case 'N': var = "\"$SLURMD_NODENAME\""; break;
      case 'n': var = "\"$SLURM_NODEID\""; break;
      case 't': var = "0"; break;
      case 'u': var = "\"$(id -un)\""; break;
      default:
        return Status::InvalidArgument(what + ": %" + std::string(1, c) +
                                       " is not supported (use %j %x %A %a %N %n %u %%)");
    }
    flush();
    out += var;
  }
  flush();
  return out.empty() ? std::string("''") : out;
}

// A path for the job's outputs: relative, no "..".
Result<std::string> OutputPath(const std::string& pattern, const std::string& what,
                               std::vector<std::string>* warnings, const std::string& where) {
  std::string p = pattern;
  if (!p.empty() && p[0] == '/') {
    p = std::filesystem::path(p).filename().string();
    warnings->push_back(where + ": " + what + ": an absolute path; the file is kept in the job's outputs as " + p);
  }
  if (p.empty() || p == "." || p.find("..") != std::string::npos) {
    return Status::InvalidArgument(where + ": " + what + ": \"" + pattern +
                                   "\" must name a file inside the job's outputs");
  }
  return p;
}

// "a,b,,c" split at `sep`: {"a", "b", "", "c"}.
std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t at = text.find(sep, start);
    out.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

std::string EscapeBraces(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '{' || c == '}') out += c;
  }
  return out;
}

}  // namespace tide::api::sbatch

namespace tide::api {

using sbatch::PositiveInt;

Result<int64_t> ParseSlurmTime(const std::string& text) {
  if (text == "UNLIMITED" || text == "unlimited" || text == "infinite" || text == "INFINITE") return 0;
  int64_t days = 0;
  std::string rest = text;
  size_t dash = rest.find('-');
  auto number = [&](const std::string& s) -> Result<int64_t> {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) {
      return Status::InvalidArgument("--time: \"" + text + "\" is not a Slurm time (MM, HH:MM:SS, D-HH:MM, ...)");
    }
    return std::stoll(s);
  };
  std::vector<std::string> parts;
  if (dash != std::string::npos) {
    auto d = number(rest.substr(0, dash));
    if (!d.ok()) return d.status();
    days = *d;
    rest = rest.substr(dash + 1);
  }
  size_t start = 0;
  while (true) {
    size_t colon = rest.find(':', start);
    parts.push_back(rest.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (parts.size() > 3) return number("x").status();
  std::vector<int64_t> v;
  for (const auto& p : parts) {
    auto n = number(p);
    if (!n.ok()) return n.status();
    v.push_back(*n);
  }
  int64_t s = 0;
  if (dash != std::string::npos) {  // D-HH, D-HH:MM, D-HH:MM:SS
    s = v[0] * 3600 + (v.size() > 1 ? v[1] * 60 : 0) + (v.size() > 2 ? v[2] : 0);
  } else if (v.size() == 1) {  // MM
    s = v[0] * 60;
  } else if (v.size() == 2) {  // MM:SS
    s = v[0] * 60 + v[1];
  } else {  // HH:MM:SS
    s = v[0] * 3600 + v[1] * 60 + v[2];
  }
  s += days * 86400;
  if (s <= 0) return Status::InvalidArgument("--time: must be positive");
  return s;
}

Status ParseSlurmDependency(const std::string& text, bool bare_id_is_afterok,
                            std::vector<JobSpec::Dependency>* out) {
  if (text.find('?') != std::string::npos) {
    return Status::InvalidArgument("\"?\" (any of) cannot be honoured");
  }
  if (text.empty()) return Status::InvalidArgument("names no job");
  auto known = [](const std::string& kind) {
    return kind == "afterok" || kind == "afterany" || kind == "afternotok";
  };
  for (const std::string& item : sbatch::Split(text, ',')) {
    size_t colon = item.find(':');
    std::string kind = item.substr(0, colon);
    std::string ids = colon == std::string::npos ? "" : item.substr(colon + 1);
    if (bare_id_is_afterok && colon == std::string::npos && !item.empty() && !known(kind)) {
      kind = "afterok";
      ids = item;
    } else if (!known(kind)) {
      return Status::InvalidArgument("\"" + kind +
                                     "\" cannot be honoured (afterok, afterany and afternotok can)");
    } else if (colon == std::string::npos) {
      return Status::InvalidArgument("\"" + item + "\" names no job");
    }
    for (const std::string& id : sbatch::Split(ids, ':')) {
      if (id.empty()) return Status::InvalidArgument("an empty job id");
      out->push_back({kind, id});
    }
  }
  return Status::Ok();
}

Status ParseSlurmArray(const std::string& text, std::vector<int>* tasks, int* max_concurrent) {
  std::string spec = text;
  *max_concurrent = 0;
  size_t pct = spec.find('%');
  auto bad = [&] {
    return Status::InvalidArgument("--array: \"" + text + "\" is not like 0-9, 1,3,5-7, 0-15:4 or 0-9%2");
  };
  if (pct != std::string::npos) {
    auto n = PositiveInt(spec.substr(pct + 1), "--array");
    if (!n.ok()) return bad();
    *max_concurrent = *n;
    spec = spec.substr(0, pct);
  }
  std::set<int> seen;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    std::string item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int step = 1;
    size_t colon = item.find(':');
    if (colon != std::string::npos) {
      auto s = PositiveInt(item.substr(colon + 1), "--array");
      if (!s.ok()) return bad();
      step = *s;
      item = item.substr(0, colon);
    }
    size_t dash = item.find('-');
    std::string lo = item.substr(0, dash), hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    for (const auto& n : {lo, hi}) {
      if (n.empty() || n.size() > 7 || n.find_first_not_of("0123456789") != std::string::npos) return bad();
    }
    int a = std::stoi(lo), b = std::stoi(hi);
    if (b < a) return bad();
    for (int i = a; i <= b; i += step) {
      if (seen.insert(i).second) tasks->push_back(i);
      if (tasks->size() > api::kMaxBatchTrials) {
        return Status::InvalidArgument("--array: more than " + std::to_string(api::kMaxBatchTrials) + " tasks");
      }
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (tasks->empty()) return bad();
  return Status::Ok();
}

}  // namespace tide::api
