#include "api/types.h"

#include "common/tls.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "common/duration.h"
#include "common/json_reader.h"
#include "common/tls.h"

namespace tide::api {

namespace {

// Longest max_runtime accepted (365 days): keeps deadlines in milliseconds and
// worst-case cost escrow far from int64 overflow.
constexpr int64_t kMaxRuntimeSeconds = 365LL * 86400;

std::string Upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// A duration field: "2h", "90s" or an integer number of seconds.
std::optional<int64_t> ReadDuration(JsonReader& r, const std::string& key) {
  const json* v = r.Raw(key);
  if (!v) return std::nullopt;
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    r.Fail(key, "is too large");
    return std::nullopt;
  }
  if (v->is_number_integer()) {
    int64_t n = v->get<int64_t>();
    if (n < 0) r.Fail(key, "must not be negative");
    return n;
  }
  if (!v->is_string()) {
    r.Fail(key, "must be a duration like \"90s\", \"30m\" or \"2h\"");
    return std::nullopt;
  }
  auto d = ParseDurationSeconds(v->get<std::string>());
  if (!d.ok()) {
    r.Fail(key, d.status().message());
    return std::nullopt;
  }
  return *d;
}

// A memory field: "24GB" or an integer number of MiB.
std::optional<int64_t> ReadMemory(JsonReader& r, const std::string& key) {
  const json* v = r.Raw(key);
  if (!v) return std::nullopt;
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    r.Fail(key, "is too large");
    return std::nullopt;
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  if (!v->is_string()) {
    r.Fail(key, "must be a size like \"24GB\" or a number of MiB");
    return std::nullopt;
  }
  auto mb = ParseMemoryMb(v->get<std::string>());
  if (!mb.ok()) {
    r.Fail(key, mb.status().message());
    return std::nullopt;
  }
  return *mb;
}

std::vector<int> IntList(const json& j) {
  std::vector<int> out;
  if (j.is_array()) {
    for (auto& v : j) {
      if (v.is_number_integer()) out.push_back(v.get<int>());
    }
  }
  return out;
}

}  // namespace

const char* JobStatusName(JobStatus s) {
  switch (s) {
    case JobStatus::kQueued: return "queued";
    case JobStatus::kStarting: return "starting";
    case JobStatus::kRunning: return "running";
    case JobStatus::kCompleted: return "completed";
    case JobStatus::kFailed: return "failed";
    case JobStatus::kCancelled: return "cancelled";
  }
  return "queued";
}

std::optional<JobStatus> ParseJobStatus(const std::string& s) {
  for (auto st : {JobStatus::kQueued, JobStatus::kStarting, JobStatus::kRunning,
                  JobStatus::kCompleted, JobStatus::kFailed, JobStatus::kCancelled}) {
    if (s == JobStatusName(st)) return st;
  }
  return std::nullopt;
}

bool IsTerminal(JobStatus s) {
  return s == JobStatus::kCompleted || s == JobStatus::kFailed || s == JobStatus::kCancelled;
}

std::string CanonicalGpuModel(const std::string& name) {
  std::string s = Upper(name);
  for (const char* prefix : {"NVIDIA ", "GEFORCE ", "TESLA ", "QUADRO "}) {
    if (s.rfind(prefix, 0) == 0) s = s.substr(strlen(prefix));
  }
  // The first '-' separates form factor and memory ("A100-SXM4-80GB").
  if (auto dash = s.find('-'); dash != std::string::npos) s = s.substr(0, dash);
  // After the first word, words naming memory size or form factor are not
  // part of the model: "H100 80GB HBM3", "A100 80GB PCIe", "H100 NVL".
  auto is_variant = [](const std::string& w) {
    size_t digits = 0;
    while (digits < w.size() && std::isdigit(static_cast<unsigned char>(w[digits]))) ++digits;
    std::string rest = w.substr(digits);
    if (digits > 0 && (rest == "GB" || rest == "G" || rest == "GIB")) return true;
    if (w.rfind("SXM", 0) == 0 || w.rfind("HBM", 0) == 0) return true;
    return w == "PCIE" || w == "NVL" || w == "GENERATION" || w == "GPU";
  };
  std::string out;
  size_t pos = 0;
  bool first = true;
  while (pos < s.size()) {
    size_t end = s.find(' ', pos);
    if (end == std::string::npos) end = s.size();
    std::string word = s.substr(pos, end - pos);
    pos = end + 1;
    if (word.empty() || (!first && is_variant(word))) continue;
    first = false;
    for (char c : word) {
      if (std::isalnum(static_cast<unsigned char>(c))) out += c;
    }
  }
  return out;
}

Result<int64_t> ParseMemoryMb(const std::string& text) {
  std::string t = Upper(text);
  size_t i = 0;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i;
  if (i == 0 || i > 12) {
    return Status::InvalidArgument("bad memory size \"" + text + "\": use e.g. 24GB or 512MB");
  }
  int64_t n = std::stoll(t.substr(0, i));
  std::string unit = t.substr(i);
  if (unit.empty() || unit == "M" || unit == "MB" || unit == "MIB") return n;
  if (unit == "G" || unit == "GB" || unit == "GIB") return n * 1024;
  if (unit == "T" || unit == "TB" || unit == "TIB") return n * 1024 * 1024;
  return Status::InvalidArgument("bad memory size \"" + text + "\": unknown unit \"" +
                                 text.substr(i) + "\" (use MB, GB or TB)");
}

// ---------------------------------------------------------------- JobSpec

Result<JobSpec> JobSpecFromJson(const json& j) {
  JobSpec spec;
  JsonReader r(j, "");
  TIDE_RETURN_IF_ERROR(r.status());

  if (auto v = r.String("name")) {
    if (v->size() > kMaxNameLength) {
      r.Fail("name", "longer than " + std::to_string(kMaxNameLength) + " characters");
    }
    spec.name = *v;
  }
  if (auto v = r.String("image")) {
    if (std::string why = CheckImageName(*v); !why.empty()) r.Fail("image", why);
    spec.image = *v;
  }
  // command: a list of arguments, or one string run by /bin/sh -c.
  if (!r.Has("command")) {
    r.Fail("command", "is required");
    (void)r.StringList("command", true);
  } else if (j["command"].is_string()) {
    auto cmd = r.String("command");
    if (cmd && cmd->empty()) r.Fail("command", "must not be empty");
    if (cmd) spec.command = {"/bin/sh", "-c", *cmd};
  } else if (auto v = r.StringList("command")) {
    if (v->empty()) r.Fail("command", "must not be empty");
    if (v->size() > kMaxCommandArgs) r.Fail("command", "too many arguments");
    if (!v->empty() && (*v)[0].empty()) r.Fail("command[0]", "must not be empty");
    spec.command = *v;
  }
  auto env_name = [](const std::string& k) {
    bool ok = !k.empty() && !std::isdigit(static_cast<unsigned char>(k[0]));
    for (char c : k) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    return ok;
  };
  if (auto v = r.StringMap("env")) {
    for (auto& [k, val] : *v) {
      if (!env_name(k)) r.Fail("env." + k, "is not a valid environment variable name");
    }
    spec.env = *v;
  }
  if (const json* secrets = r.Raw("secrets"); secrets != nullptr && secrets->is_object()) {
    // A secret left without a value (null) is one the client was to fill
    // in (tide submit --secret NAME); say so rather than "must be a string".
    for (auto& [k, val] : secrets->items()) {
      if (val.is_null()) {
        r.Fail("secrets." + k, "has no value: give it with tide submit --secret " + k);
      }
    }
  }
  if (auto v = r.StringMap("secrets")) {
    if (v->size() > kMaxSecrets) r.Fail("secrets", "at most " + std::to_string(kMaxSecrets) + " secrets");
    for (auto& [k, val] : *v) {
      if (!env_name(k)) r.Fail("secrets." + k, "is not a valid environment variable name");
      else if (spec.env.count(k)) r.Fail("secrets." + k, "is also in env: give it in one of them");
      else if (val.empty()) r.Fail("secrets." + k, "must not be empty");
      else if (val.size() > kMaxSecretBytes) r.Fail("secrets." + k, "is longer than 64 KiB");
      else if (val.find('\0') != std::string::npos) r.Fail("secrets." + k, "must not contain NUL");
    }
    spec.secrets = *v;
  }
  if (const json* res = r.Object("resources")) {
    JsonReader rr(*res, "resources");
    auto gpus = [&](const char* field) {
      auto n = rr.Int(field);
      if (!n) return false;
      if (*n < 1) rr.Fail(field, "must be at least 1");
      else if (*n > kMaxGpuCount) rr.Fail(field, "must be at most " + std::to_string(kMaxGpuCount));
      else spec.resources.gpu_count = static_cast<int>(*n);
      return true;
    };
    bool counted = gpus("gpu_count");
    if (counted && rr.Raw("gpus_per_node")) {
      rr.Fail("gpus_per_node", "is gpu_count under another name: give one of them");
    } else {
      gpus("gpus_per_node");
    }
    if (auto n = rr.Int("nodes")) {
      if (*n < 1) rr.Fail("nodes", "must be at least 1");
      else if (*n > kMaxNodes) rr.Fail("nodes", "must be at most " + std::to_string(kMaxNodes));
      else spec.resources.nodes = static_cast<int>(*n);
    }
    if (auto types = rr.StringList("gpu_type", /*allow_scalar=*/true)) {
      for (auto& t : *types) {
        std::string c = CanonicalGpuModel(t);
        if (c.empty()) rr.Fail("gpu_type", "\"" + t + "\" is not a GPU model");
        else if (c != "ANY") spec.resources.gpu_types.push_back(c);
      }
    }
    if (auto mb = ReadMemory(rr, "gpu_memory")) {
      if (*mb < 0) rr.Fail("gpu_memory", "must not be negative");
      spec.resources.gpu_memory_mb = *mb;
    }
    if (auto c = rr.Number("cpus")) {
      if (*c <= 0) rr.Fail("cpus", "must be positive");
      spec.resources.cpus = *c;
    }
    if (auto mb = ReadMemory(rr, "memory")) {
      if (*mb <= 0) rr.Fail("memory", "must be positive");
      spec.resources.memory_mb = *mb;
    }
    TIDE_RETURN_IF_ERROR(rr.Finish());
  }
  if (auto d = ReadDuration(r, "max_runtime")) {
    if (*d == 0) r.Fail("max_runtime", "must be positive");
    else if (*d > kMaxRuntimeSeconds) r.Fail("max_runtime", "must be at most 365d");
    spec.max_runtime_s = *d;
  }
  if (auto d = ReadDuration(r, "grace")) {
    if (*d > 3600) r.Fail("grace", "must be at most 1h");
    spec.grace_s = *d;
  }
  if (auto v = r.String("code")) {
    bool ok = v->size() == 64;
    for (char c : *v) ok = ok && std::isxdigit(static_cast<unsigned char>(c));
    if (!ok) r.Fail("code", "must be the id of an uploaded code archive (64 hex characters)");
    // Ids are lowercase SHA-256 hex; accept the same id in uppercase.
    for (char& c : *v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    spec.code = *v;
  }
  if (auto v = r.StringList("tags")) {
    for (size_t i = 0; i < v->size(); ++i) {
      if ((*v)[i].empty() || (*v)[i].size() > kMaxNameLength) {
        r.Fail("tags[" + std::to_string(i) + "]", "must be 1 to 128 characters");
      }
    }
    spec.tags = *v;
  }
  if (auto v = r.String("tier")) {
    if (*v != "on-demand" && *v != "spot") r.Fail("tier", "must be \"on-demand\" or \"spot\"");
    spec.tier = *v;
  }
  if (auto v = r.Int("priority")) {
    if (*v < -kMaxPriority || *v > kMaxPriority) r.Fail("priority", "must be between -1000 and 1000");
    else spec.priority = static_cast<int>(*v);
  }
  if (auto v = r.StringMap("constraints")) {
    for (auto& [k, val] : *v) {
      std::string why = CheckLabel(k, val);
      if (!why.empty()) r.Fail("constraints." + k, why);
    }
    spec.constraints = *v;
  }
  if (auto v = r.Number("max_price")) {
    if (*v <= 0 || *v > 1e6) r.Fail("max_price", "must be a positive number of credits per GPU-hour");
    else spec.max_price = static_cast<int64_t>(std::llround(*v * 1e6));
  }
  if (auto v = r.Number("max_cost")) {
    if (*v <= 0 || *v > 1e12) r.Fail("max_cost", "must be a positive number of credits");
    else spec.max_cost = static_cast<int64_t>(std::llround(*v * 1e6));
  }
  if (auto v = r.Int("retry_times")) {
    if (*v < 0 || *v > kMaxRetryTimes) r.Fail("retry_times", "must be between 0 and 100");
    else spec.retry_times = static_cast<int>(*v);
  }
  if (auto d = ReadDuration(r, "checkpoint_interval")) {
    if (*d < 10) r.Fail("checkpoint_interval", "must be at least 10s");
    else if (*d > kMaxRuntimeSeconds) r.Fail("checkpoint_interval", "must be at most 365d");
    else spec.checkpoint_interval_s = *d;
  }
  if (auto v = r.Bool("slurm")) spec.slurm = *v;
  // A gang's ranks meet over the network, so a gang has it unless it says no
  // (which cannot work).
  std::optional<bool> network = r.Bool("network");
  spec.network = network.value_or(spec.resources.nodes > 1);
  if (network && !*network && spec.resources.nodes > 1) {
    r.Fail("network", "a job on " + std::to_string(spec.resources.nodes) +
                          " nodes needs the network for its ranks to meet");
  }
  if (const json* deps = r.Raw("depends_on")) {
    if (!deps->is_array()) {
      r.Fail("depends_on", "must be a list of {\"job\": ID, \"condition\": \"afterok\"}");
    } else if (deps->size() > kMaxDependencies) {
      r.Fail("depends_on", "at most " + std::to_string(kMaxDependencies) + " dependencies");
    } else {
      for (size_t i = 0; i < deps->size(); ++i) {
        const std::string at = "depends_on[" + std::to_string(i) + "]";
        if (!(*deps)[i].is_object()) {
          r.Fail(at, "must be an object {\"job\": ID, \"condition\": \"afterok\"}");
          continue;
        }
        JsonReader dr((*deps)[i], at);
        JobSpec::Dependency dep;
        dep.condition = "afterok";
        if (auto c = dr.String("condition")) {
          if (*c != "afterok" && *c != "afterany" && *c != "afternotok") {
            dr.Fail("condition", "must be afterok, afterany or afternotok");
          }
          dep.condition = *c;
        }
        if (auto id = dr.String("job", /*required=*/true)) {
          if (id->empty() || id->size() > kMaxNameLength) dr.Fail("job", "must be a job id");
          dep.job = *id;
        }
        TIDE_RETURN_IF_ERROR(dr.Finish());
        spec.depends_on.push_back(std::move(dep));
      }
    }
  }
  TIDE_RETURN_IF_ERROR(r.Finish());
  return spec;
}

std::string CheckAddress(const std::string& address) {
  if (address.empty() || address.size() > 253) return "must be 1 to 253 characters";
  for (char c : address) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':') {
      return "must be an IP address or a host name";
    }
  }
  return "";
}

std::string CheckLabel(const std::string& key, const std::string& value) {
  auto ok = [](const std::string& s) {
    if (s.empty() || s.size() > 63) return false;
    for (char c : s) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
    }
    return true;
  };
  if (!ok(key)) return "label names are 1-63 characters of letters, digits, '.', '_' and '-'";
  if (!ok(value)) return "label values are 1-63 characters of letters, digits, '.', '_' and '-'";
  return "";
}

json ToJson(const JobSpec& s) {
  json res = {{"gpu_count", s.resources.gpu_count}};
  if (s.resources.nodes > 1) res["nodes"] = s.resources.nodes;
  if (!s.resources.gpu_types.empty()) res["gpu_type"] = s.resources.gpu_types;
  if (s.resources.gpu_memory_mb) res["gpu_memory"] = s.resources.gpu_memory_mb;
  if (s.resources.cpus > 0) res["cpus"] = s.resources.cpus;
  if (s.resources.memory_mb) res["memory"] = s.resources.memory_mb;
  json j = {{"name", s.name},   {"image", s.image},  {"command", s.command},
            {"env", s.env},     {"resources", res},  {"grace", s.grace_s},
            {"tags", s.tags}};
  if (s.max_runtime_s) j["max_runtime"] = s.max_runtime_s;
  if (!s.code.empty()) j["code"] = s.code;
  j["tier"] = s.tier;
  j["priority"] = s.priority;
  if (!s.constraints.empty()) j["constraints"] = s.constraints;
  if (s.max_price > 0) j["max_price"] = static_cast<double>(s.max_price) / 1e6;
  if (s.max_cost > 0) j["max_cost"] = static_cast<double>(s.max_cost) / 1e6;
  if (s.retry_times > 0) j["retry_times"] = s.retry_times;
  if (s.checkpoint_interval_s > 0) j["checkpoint_interval"] = s.checkpoint_interval_s;
  if (s.slurm) j["slurm"] = true;
  if (s.network) j["network"] = true;
  if (!s.depends_on.empty()) {
    json deps = json::array();
    for (const auto& d : s.depends_on) deps.push_back({{"job", d.job}, {"condition", d.condition}});
    j["depends_on"] = deps;
  }
  if (!s.secrets.empty()) j["secrets"] = s.secrets;
  return j;
}

json SecretNames(const std::map<std::string, std::string>& secrets) {
  json names = json::array();
  for (const auto& [name, value] : secrets) names.push_back(name);
  return names;
}

// ---------------------------------------------------------------- Job

json ToJson(const Rank& r) {
  json j = {{"node_id", r.node_id}, {"gpus", r.gpus}, {"rate", r.rate}, {"started_at", r.started_at},
            {"finished_at", r.finished_at}, {"reason", r.reason}};
  j["exit_code"] = r.exit_code ? json(*r.exit_code) : json(nullptr);
  return j;
}

json ToJson(const Attempt& a) {
  json j = {{"attempt", a.attempt}, {"node_id", a.node_id}, {"gpus", a.gpus},
            {"rate", a.rate}, {"started_at", a.started_at}, {"finished_at", a.finished_at},
            {"reason", a.reason}};
  j["exit_code"] = a.exit_code ? json(*a.exit_code) : json(nullptr);
  if (!a.ranks.empty()) {
    json ranks = json::array();
    for (const auto& r : a.ranks) ranks.push_back(ToJson(r));
    j["ranks"] = ranks;
    j["master_addr"] = a.master_addr;
    j["master_port"] = a.master_port;
  }
  return j;
}

double AttemptGpuSeconds(const Attempt& a, int64_t now) {
  auto span = [&](int64_t start, int64_t end, size_t gpus) {
    if (start == 0) return 0.0;
    if (end == 0) end = a.finished_at > 0 ? a.finished_at : now;
    return static_cast<double>(std::max<int64_t>(0, end - start)) / 1000.0 *
           static_cast<double>(gpus);
  };
  if (a.ranks.empty()) return span(a.started_at, a.finished_at, a.gpus.size());
  double s = 0;
  for (const auto& r : a.ranks) s += span(r.started_at, r.finished_at, r.gpus.size());
  return s;
}

namespace {
// The record readers below use json::value(), which throws on a type
// mismatch; no exception may leave this module (STYLE.md section 4).
template <typename F>
auto NoThrow(const char* what, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string(what) + ": " + e.what());
  }
}

Result<Attempt> AttemptFromJsonImpl(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("attempt must be an object");
  Attempt a;
  a.attempt = j.value("attempt", 0);
  a.node_id = j.value("node_id", "");
  if (j.contains("gpus")) a.gpus = IntList(j["gpus"]);
  a.rate = j.value("rate", int64_t{0});
  a.started_at = j.value("started_at", int64_t{0});
  a.finished_at = j.value("finished_at", int64_t{0});
  a.reason = j.value("reason", "");
  if (j.contains("exit_code") && j["exit_code"].is_number_integer()) a.exit_code = j["exit_code"].get<int>();
  if (j.contains("ranks") && j["ranks"].is_array()) {
    for (const auto& rj : j["ranks"]) {
      Rank r;
      r.node_id = rj.value("node_id", "");
      if (rj.contains("gpus")) r.gpus = IntList(rj["gpus"]);
      r.rate = rj.value("rate", int64_t{0});
      r.started_at = rj.value("started_at", int64_t{0});
      r.finished_at = rj.value("finished_at", int64_t{0});
      r.reason = rj.value("reason", "");
      if (rj.contains("exit_code") && rj["exit_code"].is_number_integer()) {
        r.exit_code = rj["exit_code"].get<int>();
      }
      a.ranks.push_back(std::move(r));
    }
    a.master_addr = j.value("master_addr", "");
    a.master_port = j.value("master_port", 0);
  }
  return a;
}
}  // namespace

Result<Attempt> AttemptFromJson(const json& j) {
  return NoThrow("attempt", [&] { return AttemptFromJsonImpl(j); });
}

namespace {
// What a job and an agent's assignment both carry: a trial's batch and
// parameters, and the checkpoint the server holds.
void AddTrialAndCheckpoint(const Job& job, json& j) {
  if (!job.batch.empty()) {
    j["batch"] = job.batch;
    j["trial"] = job.trial;
    j["params"] = job.params;
  }
  if (job.checkpoint_attempt > 0) {
    j["checkpoint"] = {{"attempt", job.checkpoint_attempt},
                       {"bytes", job.checkpoint_bytes},
                       {"at", job.checkpoint_at}};
  }
}
}  // namespace

json ToJson(const Job& job) {
  json j = ToJson(job.spec);
  if (!job.spec.secrets.empty()) j["secrets"] = SecretNames(job.spec.secrets);
  j["id"] = job.id;
  j["owner"] = job.owner;
  j["status"] = JobStatusName(job.status);
  j["reason"] = job.reason;
  j["pending_reason"] = job.pending_reason;
  if (job.pending_reason_provisional && !job.pending_reason.empty()) {
    j["pending_reason_provisional"] = true;
  }
  if (job.expected_start > 0) j["expected_start"] = job.expected_start;
  j["exit_code"] = job.exit_code ? json(*job.exit_code) : json(nullptr);
  j["attempt"] = job.attempt;
  j["node_id"] = job.node_id;
  j["gpus"] = job.gpus;
  j["created_at"] = job.created_at;
  j["started_at"] = job.started_at;
  j["finished_at"] = job.finished_at;
  j["cancel_requested"] = job.cancel_requested;
  j["cancel_reason"] = job.cancel_reason;
  j["preempt_requested"] = job.preempt_requested;
  if (!job.gang_failure.empty()) j["gang_failure"] = job.gang_failure;
  if (!job.requeue_reason.empty()) j["requeue_reason"] = job.requeue_reason;
  json attempts = json::array();
  for (auto& a : job.attempts) attempts.push_back(ToJson(a));
  j["attempts"] = attempts;
  j["retries"] = job.retries;
  AddTrialAndCheckpoint(job, j);
  if (job.deleted_at > 0) j["deleted_at"] = job.deleted_at;
  return j;
}

JobSpec DeletedSpec(const JobSpec& spec) {
  JobSpec kept;
  kept.resources = spec.resources;
  kept.tier = spec.tier;
  kept.priority = spec.priority;
  kept.tags = spec.tags;
  kept.constraints = spec.constraints;
  kept.max_price = spec.max_price;
  kept.max_cost = spec.max_cost;
  kept.max_runtime_s = spec.max_runtime_s;
  kept.grace_s = spec.grace_s;
  kept.network = spec.network;
  kept.image = spec.image;
  return kept;
}

namespace {
Result<Job> JobFromJsonImpl(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("job must be an object");
  Job job;
  json spec = json::object();
  for (const char* k : {"name", "image", "command", "env", "resources", "max_runtime", "grace",
                        "code", "tags", "tier", "priority", "constraints", "max_price", "max_cost",
                        "retry_times", "checkpoint_interval", "slurm", "network", "depends_on"}) {
    if (j.contains(k)) spec[k] = j[k];
  }
  if (spec.contains("code") && spec["code"] == "") spec.erase("code");
  if (spec.contains("max_runtime") && spec["max_runtime"] == 0) spec.erase("max_runtime");
  // A deleted job has no command left; the parse wants one.
  const int64_t deleted_at = j.value("deleted_at", int64_t{0});
  if (deleted_at > 0 && spec.value("command", json::array()).empty()) spec["command"] = {"-"};
  // Secrets: an assignment carries their values, a record or an answer
  // only their names.
  std::map<std::string, std::string> names;
  if (auto it = j.find("secrets"); it != j.end()) {
    if (it->is_object()) {
      spec["secrets"] = *it;
    } else if (it->is_array()) {
      for (const json& n : *it) {
        if (!n.is_string()) return Status::InvalidArgument("must be a list of names", "secrets");
        names[n.get<std::string>()] = "";
      }
    } else {
      return Status::InvalidArgument("must be a list of names", "secrets");
    }
  }
  auto parsed = JobSpecFromJson(spec);
  if (!parsed.ok()) return parsed.status().WithContext("job record");
  job.spec = std::move(parsed).value();
  if (!names.empty()) job.spec.secrets = std::move(names);
  job.deleted_at = deleted_at;
  if (deleted_at > 0) job.spec.command.clear();
  job.id = j.value("id", "");
  job.owner = j.value("owner", "");
  auto st = ParseJobStatus(j.value("status", "queued"));
  if (!st) return Status::InvalidArgument("bad status", "status");
  job.status = *st;
  job.reason = j.value("reason", "");
  job.pending_reason = j.value("pending_reason", "");
  job.pending_reason_provisional = j.value("pending_reason_provisional", false);
  job.expected_start = j.value("expected_start", int64_t{0});
  if (j.contains("exit_code") && j["exit_code"].is_number_integer()) job.exit_code = j["exit_code"].get<int>();
  job.attempt = j.value("attempt", 1);
  job.node_id = j.value("node_id", "");
  if (j.contains("gpus")) job.gpus = IntList(j["gpus"]);
  job.created_at = j.value("created_at", int64_t{0});
  job.started_at = j.value("started_at", int64_t{0});
  job.finished_at = j.value("finished_at", int64_t{0});
  job.cancel_requested = j.value("cancel_requested", false);
  job.cancel_reason = j.value("cancel_reason", "");
  job.preempt_requested = j.value("preempt_requested", false);
  job.gang_failure = j.value("gang_failure", "");
  job.requeue_reason = j.value("requeue_reason", j.value("gang_requeue", ""));
  job.retries = j.value("retries", 0);
  job.batch = j.value("batch", "");
  job.trial = j.value("trial", "");
  if (j.contains("params") && j["params"].is_object()) {
    for (auto& [k, v] : j["params"].items()) {
      if (v.is_string()) job.params[k] = v.get<std::string>();
    }
  }
  if (j.contains("checkpoint") && j["checkpoint"].is_object()) {
    const json& c = j["checkpoint"];
    job.checkpoint_attempt = c.value("attempt", 0);
    job.checkpoint_bytes = c.value("bytes", int64_t{0});
    job.checkpoint_at = c.value("at", int64_t{0});
  }
  if (j.contains("attempts") && j["attempts"].is_array()) {
    for (auto& a : j["attempts"]) {
      auto at = AttemptFromJson(a);
      if (!at.ok()) return at.status();
      job.attempts.push_back(*at);
    }
  }
  return job;
}
}  // namespace

Result<Job> JobFromJson(const json& j) {
  return NoThrow("job record", [&] { return JobFromJsonImpl(j); });
}

// ---------------------------------------------------------------- Node

json ToJson(const Gpu& g) {
  return {{"index", g.index},
          {"name", g.name},
          {"model", g.model},
          {"memory_mb", g.memory_mb},
          {"uuid", g.uuid},
          {"minor", g.minor},
          {"utilization_pct", g.utilization_pct},
          {"memory_used_mb", g.memory_used_mb},
          {"temperature_c", g.temperature_c}};
}

Result<Gpu> GpuFromJson(const json& j, const std::string& prefix) {
  JsonReader r(j, prefix);
  TIDE_RETURN_IF_ERROR(r.status());
  Gpu g;
  if (auto v = r.Int("index", true)) g.index = static_cast<int>(*v);
  if (auto v = r.String("name", true)) g.name = *v;
  if (auto v = r.String("model")) g.model = *v;
  if (g.model.empty()) g.model = CanonicalGpuModel(g.name);
  if (auto v = r.Int("memory_mb")) g.memory_mb = *v;
  if (auto v = r.String("uuid")) g.uuid = *v;
  if (auto v = r.Int("minor")) g.minor = static_cast<int>(*v);
  if (auto v = r.Int("utilization_pct")) g.utilization_pct = static_cast<int>(*v);
  if (auto v = r.Int("memory_used_mb")) g.memory_used_mb = *v;
  if (auto v = r.Int("temperature_c")) g.temperature_c = static_cast<int>(*v);
  TIDE_RETURN_IF_ERROR(r.Finish());
  if (g.index < 0 || g.index > 1024) return Status::InvalidArgument("out of range", prefix + ".index");
  if (g.memory_mb < 0) return Status::InvalidArgument("must not be negative", prefix + ".memory_mb");
  return g;
}

namespace {
Result<std::vector<Gpu>> GpuList(const json& j, const std::string& key) {
  std::vector<Gpu> out;
  if (!j.contains(key)) return out;
  if (!j[key].is_array()) return Status::InvalidArgument("must be a list", key);
  for (size_t i = 0; i < j[key].size(); ++i) {
    auto g = GpuFromJson(j[key][i], key + "[" + std::to_string(i) + "]");
    if (!g.ok()) return g.status();
    out.push_back(*g);
  }
  return out;
}
}  // namespace

json ToJson(const Node& n) {
  json gpus = json::array();
  for (auto& g : n.gpus) gpus.push_back(ToJson(g));
  return {{"id", n.id},
          {"name", n.name},
          {"hostname", n.hostname},
          {"address", n.address},
          {"owner", n.owner},
          {"prices", n.prices},
          {"state", n.state == NodeState::kReady ? "ready" : "lost"},
          {"gpus", gpus},
          {"labels", n.labels},
          {"images", n.images},
          {"runtime", n.runtime},
          {"cpus", n.cpus},
          {"memory_mb", n.memory_mb},
          {"draining", n.draining},
          {"registered_at", n.registered_at},
          {"last_heartbeat", n.last_heartbeat}};
}

namespace {
Result<Node> NodeFromJsonImpl(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("node must be an object");
  Node n;
  n.id = j.value("id", "");
  n.name = j.value("name", "");
  n.hostname = j.value("hostname", "");
  n.address = j.value("address", "");
  n.owner = j.value("owner", "");
  if (j.contains("prices")) n.prices = j["prices"].get<std::map<std::string, int64_t>>();
  n.state = j.value("state", "ready") == "ready" ? NodeState::kReady : NodeState::kLost;
  auto gpus = GpuList(j, "gpus");
  if (!gpus.ok()) return gpus.status();
  n.gpus = *gpus;
  if (j.contains("labels")) n.labels = j["labels"].get<std::map<std::string, std::string>>();
  if (j.contains("images")) n.images = j["images"].get<std::vector<std::string>>();
  n.runtime = j.value("runtime", "sandbox");
  n.cpus = j.value("cpus", 0.0);
  n.memory_mb = j.value("memory_mb", int64_t{0});
  n.draining = j.value("draining", false);
  n.registered_at = j.value("registered_at", int64_t{0});
  n.last_heartbeat = j.value("last_heartbeat", int64_t{0});
  return n;
}
}  // namespace

Result<Node> NodeFromJson(const json& j) {
  return NoThrow("node record", [&] { return NodeFromJsonImpl(j); });
}

// ---------------------------------------------------------------- agent protocol

std::string CheckImageName(const std::string& name) {
  if (name.empty() || name.size() > 200) return "must be 1 to 200 characters";
  if (name[0] == '.' || name[0] == '-' || name[0] == '/') {
    return "must not start with '.', '-' or '/'";
  }
  for (char c : name) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
              c == ':' || c == '/' || c == '@';
    if (!ok) return std::string("has '") + c + "': only letters, digits and . _ - : / @";
  }
  if (name.find("..") != std::string::npos) return "must not hold \"..\"";
  return "";
}

json ToJson(const RegisterRequest& r) {
  json gpus = json::array();
  for (auto& g : r.gpus) gpus.push_back(ToJson(g));
  json j = {{"name", r.name},     {"hostname", r.hostname}, {"gpus", gpus},
            {"labels", r.labels}, {"images", r.images},     {"runtime", r.runtime}};
  if (!r.address.empty()) j["address"] = r.address;
  if (!r.prices.empty()) j["prices"] = r.prices;
  if (r.cpus > 0) j["cpus"] = r.cpus;
  if (r.memory_mb > 0) j["memory_mb"] = r.memory_mb;
  return j;
}

Result<RegisterRequest> RegisterRequestFromJson(const json& j) {
  JsonReader r(j, "");
  TIDE_RETURN_IF_ERROR(r.status());
  RegisterRequest req;
  if (auto v = r.String("name", true)) req.name = *v;
  if (auto v = r.String("hostname")) req.hostname = *v;
  if (auto v = r.String("address")) {
    if (std::string why = CheckAddress(*v); !why.empty()) r.Fail("address", why);
    req.address = *v;
  }
  (void)r.Raw("gpus");
  if (const json* p = r.Raw("prices")) {
    if (!p->is_object()) {
      r.Fail("prices", "must be an object of GPU model -> micro-credits per GPU-hour");
    } else {
      for (const auto& [model, v] : p->items()) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > int64_t{1} << 50) {
          r.Fail("prices." + model, "must be a whole number of micro-credits per GPU-hour");
          break;
        }
        req.prices[CanonicalGpuModel(model)] = v.get<int64_t>();
      }
    }
  }
  if (auto v = r.StringMap("labels")) {
    for (auto& [k, val] : *v) {
      std::string why = CheckLabel(k, val);
      if (!why.empty()) r.Fail("labels." + k, why);
    }
    req.labels = *v;
  }
  if (const json* v = r.Raw("images")) {
    req.images.clear();
    if (!v->is_array() || v->empty() || v->size() > 64) {
      r.Fail("images", "must be a list of 1 to 64 image names");
    } else {
      for (const json& i : *v) {
        std::string why = i.is_string() ? CheckImageName(i.get<std::string>()) : "must be a string";
        if (!why.empty()) {
          r.Fail("images", why);
          break;
        }
        req.images.push_back(i.get<std::string>());
      }
    }
  }
  if (auto v = r.String("runtime")) {
    if (*v != "sandbox" && *v != "process" && *v != "oci") {
      r.Fail("runtime", "must be sandbox, process or oci");
    }
    req.runtime = *v;
  }
  if (auto v = r.Number("cpus")) {
    if (!(*v >= 0 && *v <= 65'536)) r.Fail("cpus", "must be 0 to 65536");
    req.cpus = *v;
  }
  if (auto v = r.Int("memory_mb")) {
    if (*v < 0 || *v > (int64_t{1} << 40)) r.Fail("memory_mb", "must be 0 to 2^40 MiB");
    req.memory_mb = *v;
  }
  TIDE_RETURN_IF_ERROR(r.Finish());
  auto gpus = GpuList(j, "gpus");
  if (!gpus.ok()) return gpus.status();
  req.gpus = *gpus;
  if (req.name.empty() || req.name.size() > kMaxNameLength) {
    return Status::InvalidArgument("must be 1 to 128 characters", "name");
  }
  return req;
}

json ToJson(const Heartbeat& h) {
  json gpus = json::array();
  for (auto& g : h.gpus) gpus.push_back(ToJson(g));
  json running = json::array();
  for (auto& r : h.running) running.push_back({{"job_id", r.job_id}, {"attempt", r.attempt}});
  return {{"gpus", gpus}, {"running", running}};
}

Result<Heartbeat> HeartbeatFromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("must be a JSON object", "body");
  Heartbeat h;
  auto gpus = GpuList(j, "gpus");
  if (!gpus.ok()) return gpus.status();
  h.gpus = *gpus;
  if (j.contains("running")) {
    if (!j["running"].is_array()) return Status::InvalidArgument("must be a list", "running");
    for (size_t i = 0; i < j["running"].size(); ++i) {
      JsonReader r(j["running"][i], "running[" + std::to_string(i) + "]");
      RunningJob rj;
      if (auto v = r.String("job_id", true)) rj.job_id = *v;
      if (auto v = r.Int("attempt", true)) rj.attempt = static_cast<int>(*v);
      TIDE_RETURN_IF_ERROR(r.Finish());
      h.running.push_back(rj);
    }
  }
  return h;
}

json ToJson(const AgentWork& w) {
  json as = json::array();
  // An assignment on the wire is narrow: what the agent runs the attempt
  // with, nothing of the job's owner, history or the server's control flags.
  for (auto& a : w.assignments) {
    const Job& job = a.job;
    json j = ToJson(job.spec);
    j["id"] = job.id;
    j["attempt"] = job.attempt;
    j["node_id"] = job.node_id;
    j["gpus"] = job.gpus;
    AddTrialAndCheckpoint(job, j);
    // TIDE_RESTART_REASON: of the attempts, only why the one before ended.
    json before = json::array();
    for (const Attempt& prev : job.attempts) {
      if (prev.attempt == job.attempt - 1) before.push_back({{"attempt", prev.attempt}, {"reason", prev.reason}});
    }
    j["attempts"] = before;
    if (a.gang.nnodes > 1) {
      j["gang"] = {{"rank", a.gang.rank}, {"nnodes", a.gang.nnodes},
                   {"master_addr", a.gang.master_addr}, {"master_port", a.gang.master_port}};
    }
    as.push_back(std::move(j));
  }
  json cs = json::array();
  for (auto& c : w.cancels) {
    cs.push_back({{"job_id", c.job_id}, {"attempt", c.attempt}, {"reason", c.reason},
                  {"grace", c.grace_s}});
  }
  json out = {{"assignments", as}, {"cancels", cs}};
  if (!w.tls_pins.empty()) out["tls_pins"] = w.tls_pins;
  if (!w.node_token.empty()) out["node_token"] = w.node_token;
  return out;
}

namespace {
Result<AgentWork> AgentWorkFromJsonImpl(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("must be a JSON object", "body");
  AgentWork w;
  if (j.contains("assignments") && j["assignments"].is_array()) {
    for (auto& a : j["assignments"]) {
      auto job = JobFromJson(a);
      if (!job.ok()) return job.status();
      Gang gang;
      if (a.contains("gang") && a["gang"].is_object()) {
        const json& g = a["gang"];
        gang.rank = g.value("rank", 0);
        gang.nnodes = g.value("nnodes", 1);
        gang.master_addr = g.value("master_addr", "");
        gang.master_port = g.value("master_port", 0);
      }
      w.assignments.push_back({*job, gang});
    }
  }
  if (j.contains("cancels") && j["cancels"].is_array()) {
    for (auto& c : j["cancels"]) {
      CancelOrder o;
      o.job_id = c.value("job_id", "");
      o.attempt = c.value("attempt", 0);
      o.reason = c.value("reason", "");
      o.grace_s = c.value("grace", int64_t{30});
      w.cancels.push_back(o);
    }
  }
  if (j.contains("tls_pins") && j["tls_pins"].is_array()) {
    for (auto& p : j["tls_pins"]) {
      if (!p.is_string() || !tls::IsPin(p.get<std::string>())) {
        return Status::InvalidArgument("must be sha256: pins", "tls_pins");
      }
      w.tls_pins.push_back(p.get<std::string>());
    }
  }
  if (j.contains("node_token")) {
    const json& t = j["node_token"];
    if (!t.is_string() || t.get<std::string>().rfind("tide_n_", 0) != 0) {
      return Status::InvalidArgument("must be a node token (tide_n_...)", "node_token");
    }
    w.node_token = t.get<std::string>();
  }
  return w;
}
}  // namespace

Result<AgentWork> AgentWorkFromJson(const json& j) {
  return NoThrow("agent work", [&] { return AgentWorkFromJsonImpl(j); });
}

json ToJson(const JobEvent& e) {
  json j = {{"attempt", e.attempt}, {"state", e.state}, {"reason", e.reason},
            {"message", e.message}};
  if (e.exit_code) j["exit_code"] = *e.exit_code;
  return j;
}

Result<JobEvent> JobEventFromJson(const json& j) {
  JsonReader r(j, "");
  TIDE_RETURN_IF_ERROR(r.status());
  JobEvent e;
  if (auto v = r.Int("attempt", true)) e.attempt = static_cast<int>(*v);
  if (auto v = r.String("state", true)) e.state = *v;
  if (auto v = r.Int("exit_code")) e.exit_code = static_cast<int>(*v);
  if (auto v = r.String("reason")) e.reason = *v;
  if (auto v = r.String("message")) e.message = v->substr(0, 4096);
  TIDE_RETURN_IF_ERROR(r.Finish());
  if (e.state != "running" && e.state != "exited") {
    return Status::InvalidArgument("must be \"running\" or \"exited\"", "state");
  }
  return e;
}

namespace {
// Messages may echo client bytes (a malformed body, a bad path); dump()
// throws on invalid UTF-8, so replace such bytes with U+FFFD up front.
std::string Utf8Safe(const std::string& s) {
  std::string dumped = json(s).dump(-1, ' ', false, json::error_handler_t::replace);
  return json::parse(dumped).get<std::string>();
}

std::string StringField(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}
}  // namespace

json ErrorJson(const Status& s) {
  json e = {{"code", CodeName(s.code())}, {"message", Utf8Safe(s.message())}};
  if (!s.field().empty()) e["field"] = Utf8Safe(s.field());
  return {{"error", e}};
}

Status StatusFromErrorJson(int http_status, const std::string& body) {
  json j = json::parse(body, nullptr, false);
  std::string msg = "HTTP " + std::to_string(http_status);
  std::string field;
  std::string code;
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const json& e = j["error"];
    if (std::string m = StringField(e, "message"); !m.empty()) msg = m;
    field = StringField(e, "field");
    code = StringField(e, "code");
  } else if (!body.empty()) {
    msg += ": " + body.substr(0, 200);
  }
  // The code field is authoritative; the HTTP status is the fallback.
  if (code == "invalid_argument") return Status::InvalidArgument(msg, field);
  if (code == "not_found") return Status::NotFound(msg);
  if (code == "conflict") return Status::Conflict(msg);
  if (code == "unauthenticated") return Status::Unauthenticated(msg);
  if (code == "permission_denied") return Status::PermissionDenied(msg);
  if (code == "too_large") return Status::TooLarge(msg);
  if (code == "insufficient_credit") return Status::InsufficientCredit(msg);
  if (code == "unavailable") return Status::Unavailable(msg);
  // A 429 passes: clients retry it as they retry a server they cannot reach.
  if (code == "rate_limited" || http_status == 429) return Status::Unavailable(msg);
  if (code == "internal") return Status::Internal(msg);
  if (http_status == 400) return Status::InvalidArgument(msg, field);
  if (http_status == 401) return Status::Unauthenticated(msg);
  if (http_status == 403) return Status::PermissionDenied(msg);
  if (http_status == 404) return Status::NotFound(msg);
  if (http_status == 409) return Status::Conflict(msg);
  if (http_status == 413) return Status::TooLarge(msg);
  if (http_status == 402) return Status::InsufficientCredit(msg);
  if (http_status == 503) return Status::Unavailable(msg);
  return Status::Internal(msg);
}

}  // namespace tide::api
