#include "cli/sbatch.h"

#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "api/batch.h"
#include "api/client.h"
#include "api/http_client.h"
#include "api/types.h"
#include "cli/common.h"
#include "common/archive.h"
#include "common/paths.h"

namespace tide::cli {

using nlohmann::json;

namespace {

// One option, from a directive line (line > 0) or the command line (0).
struct Opt {
  std::string name;  // long name, without dashes
  std::string value;
  int line = 0;
};

// Slurm's options: short letter (0 = none), whether a value follows.
struct OptInfo {
  char letter;
  bool value;
};
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

std::string EscapeBraces(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '{' || c == '}') out += c;
  }
  return out;
}

}  // namespace

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

Result<SbatchPlan> PlanSbatch(const std::string& script, const std::string& filename,
                              const std::vector<std::string>& cli_options,
                              const std::vector<std::string>& script_args) {
  if (script.rfind("#!", 0) != 0) {
    return Status::InvalidArgument(filename + ":1: this does not look like a batch script: the first "
                                   "line must start with #! and the path of an interpreter (as for sbatch)");
  }
  // Directives: #SBATCH lines before the first command.
  std::vector<Opt> opts;
  size_t pos = 0;
  for (int line = 1; pos < script.size(); ++line) {
    size_t nl = script.find('\n', pos);
    std::string text = script.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? script.size() : nl + 1;
    std::string trimmed = text.substr(std::min(text.size(), text.find_first_not_of(" \t")));
    if (line == 1) continue;
    if (trimmed.empty()) continue;
    if (trimmed.rfind("#SBATCH", 0) == 0) {
      TIDE_RETURN_IF_ERROR(ReadOptions(Words(trimmed.substr(7)), line, filename, &opts));
      continue;
    }
    if (trimmed[0] == '#') continue;
    break;  // sbatch stops reading directives at the first command
  }
  TIDE_RETURN_IF_ERROR(ReadOptions(cli_options, 0, filename, &opts));
  // The last one wins, and the command line comes last.
  std::map<std::string, Opt> last;
  for (const auto& o : opts) last[o.name] = o;

  SbatchPlan plan;
  plan.parsable = last.count("parsable") > 0;
  auto where = [&](const Opt& o) { return Where(filename, o.line); };
  auto fail = [&](const Opt& o, const std::string& why) {
    return Status::InvalidArgument(where(o) + ": --" + o.name + ": " + why);
  };
  auto warn = [&](const Opt& o, const std::string& why) {
    plan.warnings.push_back(where(o) + ": --" + o.name + ": " + why);
  };
  auto get = [&](const std::string& name) -> const Opt* {
    auto it = last.find(name);
    return it == last.end() ? nullptr : &it->second;
  };

  const std::string base = std::filesystem::path(filename).filename().string();
  json spec = json::object();
  json res = json::object();
  json env = json::object();
  spec["name"] = base;
  spec["slurm"] = true;

  int nodes = 1;
  if (const Opt* o = get("nodes")) {
    auto n = PositiveInt(o->value, "--nodes");
    if (!n.ok()) return fail(*o, "must be one number of nodes (a range like 2-4 cannot be honoured)");
    nodes = *n;
    res["nodes"] = nodes;
  }
  int gpus_per_node = 0;
  std::string gpu_type;
  auto typed_count = [&](const Opt& o, const std::string& value, int* count) -> Status {
    size_t colon = value.rfind(':');
    std::string n = colon == std::string::npos ? value : value.substr(colon + 1);
    if (colon != std::string::npos) gpu_type = value.substr(0, colon);
    auto c = PositiveInt(n, "--" + o.name);
    if (!c.ok()) return fail(o, "\"" + value + "\" is not [TYPE:]COUNT");
    *count = *c;
    return Status::Ok();
  };
  if (const Opt* o = get("gres")) {
    std::string v = o->value;
    if (v.rfind("gpu", 0) != 0) return fail(*o, "only gpu[:TYPE]:COUNT resources exist here");
    v = v.substr(3);
    if (v.empty()) {
      gpus_per_node = 1;
    } else if (v[0] != ':') {
      return fail(*o, "\"" + o->value + "\" is not gpu[:TYPE]:COUNT");
    } else {
      TIDE_RETURN_IF_ERROR(typed_count(*o, v.substr(1), &gpus_per_node));
    }
  }
  if (const Opt* o = get("gpus-per-node")) TIDE_RETURN_IF_ERROR(typed_count(*o, o->value, &gpus_per_node));
  if (const Opt* o = get("gpus")) {
    int total = 0;
    TIDE_RETURN_IF_ERROR(typed_count(*o, o->value, &total));
    if (total % nodes != 0) {
      return fail(*o, std::to_string(total) + " GPUs do not split evenly over " + std::to_string(nodes) + " nodes");
    }
    gpus_per_node = total / nodes;
  }
  res["gpu_count"] = gpus_per_node > 0 ? gpus_per_node : 1;
  if (gpus_per_node == 0) {
    plan.warnings.push_back("no GPUs asked for (--gpus, --gres=gpu:N): the job gets 1 GPU, the least Tide places");
  }
  if (!gpu_type.empty()) res["gpu_type"] = gpu_type;

  int tasks_per_node = 1;
  if (const Opt* o = get("ntasks-per-node")) {
    auto n = PositiveInt(o->value, "--ntasks-per-node");
    if (!n.ok()) return fail(*o, "must be a positive number");
    tasks_per_node = *n;
  }
  if (const Opt* o = get("ntasks")) {
    auto n = PositiveInt(o->value, "--ntasks");
    if (!n.ok()) return fail(*o, "must be a positive number");
    if (*n > nodes) tasks_per_node = std::max(tasks_per_node, (*n + nodes - 1) / nodes);
  }
  if (tasks_per_node > 1) {
    plan.warnings.push_back("--ntasks: the script runs once per node and srun is not provided; the CPUs "
                            "and memory of all " + std::to_string(tasks_per_node) +
                            " tasks per node are asked for");
  }
  double cpus = 0;
  if (const Opt* o = get("cpus-per-task")) {
    auto n = PositiveInt(o->value, "--cpus-per-task");
    if (!n.ok()) return fail(*o, "must be a positive number");
    if (static_cast<int64_t>(*n) * tasks_per_node > 100'000) return fail(*o, "is more CPUs than any node has");
    cpus = *n * tasks_per_node;
    res["cpus"] = cpus;
  }
  if (const Opt* o = get("mem")) {
    auto mb = SlurmMemoryMb(o->value, "--mem");
    if (!mb.ok()) return fail(*o, mb.status().message());
    res["memory"] = *mb;
  } else if (const Opt* o = get("mem-per-cpu")) {
    auto mb = SlurmMemoryMb(o->value, "--mem-per-cpu");
    if (!mb.ok()) return fail(*o, mb.status().message());
    res["memory"] = *mb * static_cast<int64_t>(std::max(1.0, cpus));
  } else if (const Opt* o = get("mem-per-gpu")) {
    auto mb = SlurmMemoryMb(o->value, "--mem-per-gpu");
    if (!mb.ok()) return fail(*o, mb.status().message());
    res["memory"] = *mb * res["gpu_count"].get<int>();
  }
  spec["resources"] = res;

  int64_t runtime = 0;
  if (const Opt* o = get("time")) {
    auto t = ParseSlurmTime(o->value);
    if (!t.ok()) return fail(*o, t.status().message());
    runtime = *t;
  }
  if (const Opt* o = get("signal")) {
    // [{R|B}:]SIG[@SECONDS]: Tide's notice is SIGTERM at the end of
    // max_runtime, then the grace period.
    std::string v = o->value;
    if (v.size() > 2 && (v[0] == 'R' || v[0] == 'B') && v[1] == ':') v = v.substr(2);
    size_t at = v.find('@');
    std::string sig = v.substr(0, at);
    int64_t before = at == std::string::npos ? 60 : 0;
    if (at != std::string::npos) {
      auto n = PositiveInt(v.substr(at + 1), "--signal");
      if (!n.ok()) return fail(*o, "\"" + o->value + "\" is not [B:]SIGNAL[@SECONDS]");
      before = *n;
    }
    if (sig != "TERM" && sig != "SIGTERM" && sig != "15") {
      return fail(*o, "the notice is SIGTERM (and $TIDE_NOTICE_FILE), not " + sig +
                          ": a handler for " + sig + " would never run");
    }
    if (runtime == 0) return fail(*o, "needs --time: the signal comes that long before the time limit");
    if (before >= runtime) return fail(*o, "comes before the job starts (at or over --time)");
    before = std::min<int64_t>(before, 3600);
    runtime -= before;
    spec["grace"] = before;
  }
  if (runtime > 0) spec["max_runtime"] = runtime;
  if (const Opt* o = get("job-name")) {
    if (o->value.empty()) return fail(*o, "must not be empty");
    spec["name"] = o->value;
  }
  if (const Opt* o = get("partition")) {
    if (o->value.find(',') != std::string::npos) {
      return fail(*o, "a list of partitions cannot be honoured; give one (it is the node label partition=NAME)");
    }
    std::string why = api::CheckLabel("partition", o->value);
    if (!why.empty()) return fail(*o, why);
    spec["constraints"] = {{"partition", o->value}};
  }
  if (const Opt* o = get("dependency")) {
    if (o->value.find('?') != std::string::npos) return fail(*o, "\"?\" (any of) cannot be honoured");
    json deps = json::array();
    size_t start = 0;
    while (start <= o->value.size()) {
      size_t comma = o->value.find(',', start);
      std::string item = o->value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      size_t colon = item.find(':');
      std::string kind = item.substr(0, colon);
      if (kind != "afterok" && kind != "afterany" && kind != "afternotok") {
        return fail(*o, "\"" + kind + "\" cannot be honoured (afterok, afterany and afternotok can)");
      }
      if (colon == std::string::npos) return fail(*o, "\"" + item + "\" names no job");
      std::string ids = item.substr(colon + 1);
      size_t s = 0;
      while (s <= ids.size()) {
        size_t c = ids.find(':', s);
        std::string id = ids.substr(s, c == std::string::npos ? std::string::npos : c - s);
        if (id.empty()) return fail(*o, "an empty job id");
        deps.push_back({{"job", id}, {"condition", kind}});
        if (c == std::string::npos) break;
        s = c + 1;
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    spec["depends_on"] = deps;
  }
  if (const Opt* o = get("nice")) {
    try {
      int64_t n = std::stoll(o->value);
      spec["priority"] = std::clamp<int64_t>(-n, -api::kMaxPriority, api::kMaxPriority);
    } catch (...) {
      return fail(*o, "must be a number");
    }
  }

  // Harmless ones, and ones that would change the result.
  const std::map<std::string, std::string> kIgnored = {
      {"account", "ignored: the job is billed to your own account"},
      {"qos", "ignored: Tide orders work by tier, fair share and priority"},
      {"mail-type", "ignored: no mail is sent (tide wait, tide batch status)"},
      {"mail-user", "ignored: no mail is sent"},
      {"comment", "ignored"},
      {"wckey", "ignored"},
      {"open-mode", "ignored: output files are appended to"},
      {"hint", "ignored"},
      {"cpu-bind", "ignored"},
      {"gpu-bind", "ignored"},
      {"distribution", "ignored: one task per node"},
      {"threads-per-core", "ignored"},
      {"time-min", "ignored: the job gets --time"},
      {"exclusive", "ignored: Tide places by GPUs; the job gets the GPUs it asked for"},
      {"export", "ignored: the environment is always the job's own (TIDE_*, SLURM_*)"},
      {"propagate", "ignored: limits are the node's"},
      {"get-user-env", "ignored"},
      {"chdir", "ignored: the script runs in its work directory ($SLURM_SUBMIT_DIR)"},
      {"requeue", "a job is always requeued after a preemption or a lost node"},
      {"no-requeue", "ignored: a job is always requeued after a preemption or a lost node"},
      {"parsable", ""},
      {"quiet", ""},
      {"verbose", ""},
      {"kill-on-invalid-dep", "a job whose dependency can never be met is always cancelled"},
  };
  const std::map<std::string, std::string> kRefused = {
      {"constraint", "node features cannot be honoured; use --partition (a node label)"},
      {"nodelist", "cannot pick nodes by name"},
      {"exclude", "cannot exclude nodes by name"},
      {"begin", "a deferred start cannot be honoured"},
      {"deadline", "a deadline cannot be honoured"},
      {"hold", "a held job cannot be honoured"},
      {"reservation", "reservations cannot be honoured"},
      {"licenses", "licenses cannot be honoured"},
      {"gpus-per-task", "give --gpus-per-node or --gres=gpu:N: one task runs per node"},
      {"wait", "use tide wait ID"},
      {"priority", "use --nice"},
  };
  for (const auto& [name, o] : last) {
    if (auto r = kRefused.find(name); r != kRefused.end()) return fail(o, r->second);
    if (auto w = kIgnored.find(name); w != kIgnored.end() && !w->second.empty()) warn(o, w->second);
  }

  // The array, as a batch of the same job.
  std::vector<int> tasks;
  int max_concurrent = 0;
  if (const Opt* o = get("array")) {
    Status st = ParseSlurmArray(o->value, &tasks, &max_concurrent);
    if (!st.ok()) return fail(*o, st.message());
    plan.array = true;
  }

  // The command: the script itself, its output also written to the file
  // --output names (Slurm's default slurm-%j.out, slurm-%A_%a.out for an
  // array) in the job's outputs.
  std::string out_pattern = plan.array ? "slurm-%A_%a.out" : "slurm-%j.out";
  int out_line = 0;
  if (const Opt* o = get("output")) {
    out_pattern = o->value;
    out_line = o->line;
  }
  auto out_path = OutputPath(out_pattern, "--output", &plan.warnings, Where(filename, out_line));
  if (!out_path.ok()) return out_path.status();
  auto out_expr = PatternExpression(*out_path, Where(filename, out_line) + ": --output");
  if (!out_expr.ok()) return out_expr.status();
  std::string wrapper = "cd \"$SLURM_SUBMIT_DIR\" || exit 1\n";
  if (plan.array) wrapper += "export SLURM_ARRAY_JOB_ID=\"$TIDE_BATCH\"\n";
  wrapper += "out=\"$TIDE_OUTPUT_DIR\"/" + *out_expr + "\nmkdir -p \"$(dirname \"$out\")\"\n";
  // tee ignores the notice's SIGTERM so the script's last words are kept.
  const std::string tee = "( trap '' TERM; exec tee -a \"$out\" )";
  if (const Opt* o = get("error")) {
    auto err_path = OutputPath(o->value, "--error", &plan.warnings, where(*o));
    if (!err_path.ok()) return err_path.status();
    auto err_expr = PatternExpression(*err_path, where(*o) + ": --error");
    if (!err_expr.ok()) return err_expr.status();
    wrapper += "err=\"$TIDE_OUTPUT_DIR\"/" + *err_expr + "\nmkdir -p \"$(dirname \"$err\")\"\n";
    wrapper += "\"./$0\" \"$@\" 2> >( trap '' TERM; exec tee -a \"$err\" >&2 ) | " + tee +
               "\nexit \"${PIPESTATUS[0]}\"\n";
  } else {
    wrapper += "\"./$0\" \"$@\" 2>&1 | " + tee + "\nexit \"${PIPESTATUS[0]}\"\n";
  }
  json command = {"/bin/bash", "-c", wrapper, base};
  for (const auto& a : script_args) command.push_back(a);
  spec["command"] = command;
  if (!env.empty()) spec["env"] = env;

  if (!plan.array) {
    auto valid = api::JobSpecFromJson(spec);
    if (!valid.ok()) return Status::InvalidArgument(filename + ": " + valid.status().ToString());
    plan.spec = spec;
    return plan;
  }
  // Every string of a batch template is a pattern: braces are literal.
  json tmpl = spec;
  for (auto& c : tmpl["command"]) c = EscapeBraces(c.get<std::string>());
  tmpl["name"] = EscapeBraces(tmpl["name"].get<std::string>());
  tmpl["env"] = {{"SLURM_ARRAY_TASK_ID", "{task}"},
                 {"SLURM_ARRAY_TASK_COUNT", std::to_string(tasks.size())},
                 {"SLURM_ARRAY_TASK_MIN", std::to_string(*std::min_element(tasks.begin(), tasks.end()))},
                 {"SLURM_ARRAY_TASK_MAX", std::to_string(*std::max_element(tasks.begin(), tasks.end()))}};
  json jobs = json::array();
  for (int t : tasks) jobs.push_back({{"id", std::to_string(t)}, {"task", t}});
  json batch = {{"experiment_batch", spec["name"]}, {"template", tmpl}, {"jobs", jobs}};
  if (max_concurrent > 0) batch["max_concurrent"] = max_concurrent;
  auto valid = api::BatchSpecFromJson(batch);
  if (!valid.ok()) return Status::InvalidArgument(filename + ": " + valid.status().ToString());
  plan.spec = spec;
  plan.batch = batch;
  return plan;
}

namespace {

struct SbatchArgs {
  bool parsable = false;
  std::vector<std::string> rest;  // [sbatch options...] script [args...]
};

int RunSbatch(const SbatchArgs& args) {
  std::vector<std::string> options, script_args;
  std::string script_path;
  for (size_t i = 0; i < args.rest.size(); ++i) {
    const std::string& w = args.rest[i];
    if (!script_path.empty()) {
      script_args.push_back(w);
      continue;
    }
    if (w.size() >= 2 && w[0] == '-') {
      options.push_back(w);
      // "--opt value" and "-X value": the value is the next word.
      bool inline_value = w.find('=') != std::string::npos || (w[1] != '-' && w.size() > 2);
      std::string name = w[1] == '-' ? w.substr(2, w.find('=') == std::string::npos
                                                        ? std::string::npos
                                                        : w.find('=') - 2)
                                     : "";
      if (w[1] != '-') {
        for (const auto& [n, info] : Options()) {
          if (info.letter == w[1]) name = n;
        }
      }
      auto info = Options().find(name);
      if (!inline_value && info != Options().end() && info->second.value && i + 1 < args.rest.size()) {
        options.push_back(args.rest[++i]);
      }
      continue;
    }
    script_path = w;
  }
  if (script_path.empty()) {
    std::cerr << "error: no batch script given: tide sbatch [OPTIONS] SCRIPT [ARGS]\n";
    return kExitUsage;
  }
  auto text = ReadFile(script_path);
  if (!text.ok()) return PrintError(text.status());
  auto plan = PlanSbatch(*text, script_path, options, script_args);
  if (!plan.ok()) return PrintError(plan.status());
  for (const auto& w : plan->warnings) std::cerr << "warning: " << w << "\n";

  // The script travels as the job's code archive.
  char tmpl[] = "/tmp/tide-sbatch-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return PrintError(Status::Internal("mkdtemp failed"));
  std::string dir = tmpl;
  const std::string base = std::filesystem::path(script_path).filename().string();
  Status written = WriteFileAtomic(dir + "/" + base, *text, 0755);
  auto archive = written.ok() ? PackDirectory(dir) : Result<std::string>(written);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!archive.ok()) return PrintError(archive.status());
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto code = (*client)->UploadCode(*archive);
  if (!code.ok()) return PrintError(code.status());

  std::string id;
  if (plan->array) {
    json batch = plan->batch;
    batch["template"]["code"] = *code;
    auto answer = (*client)->Call("POST", "/v1/batches", batch, 300'000);
    if (!answer.ok()) return PrintError(answer.status());
    id = JsonString(*answer, "id");
  } else {
    json spec = plan->spec;
    spec["code"] = *code;
    auto job = (*client)->SubmitJob(spec);
    if (!job.ok()) return PrintError(job.status());
    id = job->id;
  }
  if (args.parsable || plan->parsable) {
    std::cout << id << "\n";
  } else {
    std::cout << "Submitted batch job " << id << "\n";
  }
  return kExitOk;
}

}  // namespace

void AddSbatchCommand(CLI::App& app) {
  auto args = std::make_shared<SbatchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "sbatch", "Run a Slurm batch script unchanged: tide sbatch [SBATCH OPTIONS] SCRIPT [ARGS]");
  cmd->add_flag("--parsable", args->parsable, "Print only the job (or array) id");
  cmd->allow_extras();
  cmd->prefix_command();
  SetAction(cmd, [args, cmd] {
    args->rest = cmd->remaining();
    return RunSbatch(*args);
  });
}

}  // namespace tide::cli
