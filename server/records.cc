#include "server/records.h"

#include <cmath>

namespace tide::server {

using nlohmann::json;

namespace {

// Lenient field readers: a missing field, or one of another type, reads
// as `fallback`. They never throw.
std::string Str(const json& j, const char* key, const std::string& fallback = "") {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}
int64_t Int(const json& j, const char* key, int64_t fallback = 0) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return fallback;
  if (it->is_number_float()) return static_cast<int64_t>(it->get<double>());
  return it->get<int64_t>();
}
double Num(const json& j, const char* key, double fallback = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}
bool Bool(const json& j, const char* key, bool fallback = false) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}
std::optional<int> OptInt(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int>();
}
std::vector<int> Ints(const json& j, const char* key) {
  std::vector<int> out;
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return out;
  for (const json& v : *it) {
    if (v.is_number_integer()) out.push_back(v.get<int>());
  }
  return out;
}
std::vector<std::string> Strs(const json& j, const char* key) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end()) return out;
  if (it->is_string()) return {it->get<std::string>()};
  if (!it->is_array()) return out;
  for (const json& v : *it) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}
std::map<std::string, std::string> StrMap(const json& j, const char* key) {
  std::map<std::string, std::string> out;
  auto it = j.find(key);
  if (it == j.end() || !it->is_object()) return out;
  for (const auto& [k, v] : it->items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}
// Credits written as a number of credits: back to micro-credits.
int64_t Credits(const json& j, const char* key) {
  return static_cast<int64_t>(std::llround(Num(j, key) * 1e6));
}

api::JobSpec SpecFromRecord(const json& j) {
  api::JobSpec s;
  s.name = Str(j, "name");
  s.image = Str(j, "image", "host");
  s.command = Strs(j, "command");
  s.env = StrMap(j, "env");
  // Names only: the values are in the secrets table (JobState::Load).
  for (const std::string& name : Strs(j, "secrets")) s.secrets[name] = "";
  if (auto r = j.find("resources"); r != j.end() && r->is_object()) {
    s.resources.nodes = static_cast<int>(Int(*r, "nodes", 1));
    s.resources.gpu_count = static_cast<int>(Int(*r, "gpu_count", 1));
    s.resources.gpu_types = Strs(*r, "gpu_type");
    s.resources.gpu_memory_mb = Int(*r, "gpu_memory");
    s.resources.cpus = Num(*r, "cpus");
    s.resources.memory_mb = Int(*r, "memory");
  }
  s.max_runtime_s = Int(j, "max_runtime");
  s.grace_s = Int(j, "grace", 30);
  s.code = Str(j, "code");
  s.tags = Strs(j, "tags");
  s.tier = Str(j, "tier", "on-demand");
  s.priority = static_cast<int>(Int(j, "priority"));
  s.constraints = StrMap(j, "constraints");
  s.max_price = Credits(j, "max_price");
  s.max_cost = Credits(j, "max_cost");
  s.retry_times = static_cast<int>(Int(j, "retry_times"));
  s.checkpoint_interval_s = Int(j, "checkpoint_interval");
  s.slurm = Bool(j, "slurm");
  s.network = Bool(j, "network");
  if (auto d = j.find("depends_on"); d != j.end() && d->is_array()) {
    for (const json& dep : *d) {
      if (dep.is_object()) s.depends_on.push_back({Str(dep, "condition", "afterok"), Str(dep, "job")});
    }
  }
  return s;
}

// What an attempt and each rank of a gang's attempt both hold.
template <typename Piece>
Piece PieceFromRecord(const json& j) {
  Piece p;
  p.node_id = Str(j, "node_id");
  p.gpus = Ints(j, "gpus");
  p.rate = Int(j, "rate");
  p.started_at = Int(j, "started_at");
  p.finished_at = Int(j, "finished_at");
  p.reason = Str(j, "reason");
  p.exit_code = OptInt(j, "exit_code");
  return p;
}

api::Attempt AttemptFromRecord(const json& j) {
  api::Attempt a = PieceFromRecord<api::Attempt>(j);
  a.attempt = static_cast<int>(Int(j, "attempt"));
  if (auto ranks = j.find("ranks"); ranks != j.end() && ranks->is_array()) {
    for (const json& r : *ranks) {
      if (r.is_object()) a.ranks.push_back(PieceFromRecord<api::Rank>(r));
    }
    a.master_addr = Str(j, "master_addr");
    a.master_port = static_cast<int>(Int(j, "master_port"));
  }
  return a;
}

}  // namespace

std::string JobRecordDoc(const api::Job& job) {
  // The wire form holds every field of the record today; the version says
  // how to read it back should the two part.
  json j = api::ToJson(job);
  j.erase("expected_start");  // derived, never stored
  j["record_version"] = kRecordVersion;
  return j.dump();
}

// Version 0 is what servers before record_version wrote: the same fields.
Result<api::Job> JobRecordFromDoc(const std::string& doc) {
  json j = json::parse(doc, nullptr, false);
  if (!j.is_object()) return Status::InvalidArgument("job record is not a JSON object");
  const int64_t version = Int(j, "record_version", 0);
  if (version > kRecordVersion) {
    return Status::InvalidArgument("job record version " + std::to_string(version) +
                                   " is newer than this server reads (" +
                                   std::to_string(kRecordVersion) + "); run a newer tide server");
  }
  api::Job job;
  job.spec = SpecFromRecord(j);
  job.id = Str(j, "id");
  job.owner = Str(j, "owner");
  if (job.id.empty()) return Status::InvalidArgument("job record has no id", "id");
  auto status = api::ParseJobStatus(Str(j, "status", "queued"));
  if (!status) return Status::InvalidArgument("job record has an unknown status", "status");
  job.status = *status;
  job.reason = Str(j, "reason");
  job.pending_reason = Str(j, "pending_reason");
  job.exit_code = OptInt(j, "exit_code");
  job.attempt = static_cast<int>(Int(j, "attempt", 1));
  job.node_id = Str(j, "node_id");
  job.gpus = Ints(j, "gpus");
  job.created_at = Int(j, "created_at");
  job.started_at = Int(j, "started_at");
  job.finished_at = Int(j, "finished_at");
  job.cancel_requested = Bool(j, "cancel_requested");
  job.cancel_reason = Str(j, "cancel_reason");
  job.preempt_requested = Bool(j, "preempt_requested");
  job.gang_failure = Str(j, "gang_failure");
  // "gang_requeue" is the name servers before node draining wrote.
  job.requeue_reason = Str(j, "requeue_reason", Str(j, "gang_requeue"));
  job.retries = static_cast<int>(Int(j, "retries"));
  job.batch = Str(j, "batch");
  job.trial = Str(j, "trial");
  job.params = StrMap(j, "params");
  if (auto c = j.find("checkpoint"); c != j.end() && c->is_object()) {
    job.checkpoint_attempt = static_cast<int>(Int(*c, "attempt"));
    job.checkpoint_bytes = Int(*c, "bytes");
    job.checkpoint_at = Int(*c, "at");
  }
  job.deleted_at = Int(j, "deleted_at");
  if (auto attempts = j.find("attempts"); attempts != j.end() && attempts->is_array()) {
    for (const json& a : *attempts) {
      if (a.is_object()) job.attempts.push_back(AttemptFromRecord(a));
    }
  }
  return job;
}

std::string NodeRecordDoc(const api::Node& node, const NodeHistory& history) {
  api::Node copy = node;
  for (auto& g : copy.gpus) {  // telemetry is not worth a write
    g.utilization_pct = -1;
    g.memory_used_mb = -1;
    g.temperature_c = -1;
  }
  json j = api::ToJson(copy);
  j["record_version"] = kRecordVersion;
  j["history"] = {{"ended", history.ended}, {"bad", history.bad}};
  return j.dump();
}

Result<NodeRecord> NodeRecordFromDoc(const std::string& doc) {
  json j = json::parse(doc, nullptr, false);
  if (!j.is_object()) return Status::InvalidArgument("node record is not a JSON object");
  const int64_t version = Int(j, "record_version", 0);
  if (version > kRecordVersion) {
    return Status::InvalidArgument("node record version " + std::to_string(version) +
                                   " is newer than this server reads; run a newer tide server");
  }
  NodeRecord out;
  api::Node& n = out.node;
  n.id = Str(j, "id");
  n.name = Str(j, "name");
  n.hostname = Str(j, "hostname");
  n.address = Str(j, "address");
  n.owner = Str(j, "owner");
  if (auto p = j.find("prices"); p != j.end() && p->is_object()) {
    for (const auto& [model, v] : p->items()) {
      if (v.is_number_integer()) n.prices[model] = v.get<int64_t>();
    }
  }
  n.state = Str(j, "state", "ready") == "ready" ? api::NodeState::kReady : api::NodeState::kLost;
  if (auto gpus = j.find("gpus"); gpus != j.end() && gpus->is_array()) {
    for (const json& g : *gpus) {
      if (!g.is_object()) continue;
      api::Gpu gpu;
      gpu.index = static_cast<int>(Int(g, "index"));
      gpu.name = Str(g, "name");
      gpu.model = Str(g, "model");
      if (gpu.model.empty()) gpu.model = api::CanonicalGpuModel(gpu.name);
      gpu.memory_mb = Int(g, "memory_mb");
      gpu.uuid = Str(g, "uuid");
      gpu.minor = static_cast<int>(Int(g, "minor", -1));
      n.gpus.push_back(std::move(gpu));
    }
  }
  n.labels = StrMap(j, "labels");
  if (j.contains("images")) n.images = Strs(j, "images");
  if (n.images.empty()) n.images = {"host"};
  n.runtime = Str(j, "runtime", "sandbox");
  n.cpus = Num(j, "cpus");
  n.memory_mb = Int(j, "memory_mb");
  n.draining = Bool(j, "draining");
  n.registered_at = Int(j, "registered_at");
  n.last_heartbeat = Int(j, "last_heartbeat");
  if (auto h = j.find("history"); h != j.end() && h->is_object()) {
    out.history.ended = Int(*h, "ended");
    out.history.bad = Int(*h, "bad");
  }
  return out;
}

}  // namespace tide::server
