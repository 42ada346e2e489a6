#include "scheduler/replay/trace.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <sstream>

namespace tide::sched::replay {

namespace {

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

Status LineError(const std::string& name, int line, const std::string& msg) {
  return Status::InvalidArgument(name + ":" + std::to_string(line) + ": " + msg);
}

// Non-negative seconds; fractions round up (a job that ran 0.4 s still ran).
bool ParseSeconds(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (!end || *end != '\0' || !(v >= 0) || v > 1e12) return false;
  *out = static_cast<int64_t>(std::ceil(v));
  return true;
}

bool ParseCount(const std::string& s, int* out, bool zero_ok = false) {
  if (s.empty() || s.size() > 7) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  *out = std::stoi(s);
  return zero_ok || *out > 0;
}

bool ParseNumber(const std::string& s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && end && *end == '\0' && *out >= 0;
}

std::vector<std::string> SplitTypes(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, '|')) {
    if (!part.empty()) out.push_back(CanonicalModel(part));
  }
  return out;
}

// A CSV with a header row: calls `row` with a column lookup for each line.
using Row = std::function<Status(int line, const std::function<const std::string&(const char*)>& col)>;

Status ReadCsv(std::istream& in, const std::string& name, const std::vector<std::string>& required,
               const Row& row) {
  std::string line;
  if (!std::getline(in, line)) return LineError(name, 1, "empty file");
  auto cols = SplitCsv(line);
  std::map<std::string, size_t> idx;
  for (size_t i = 0; i < cols.size(); ++i) idx[cols[i]] = i;
  for (const auto& r : required) {
    if (!idx.count(r)) return LineError(name, 1, "header has no \"" + r + "\" column");
  }
  static const std::string kEmpty;
  int lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line == "\r") continue;
    auto f = SplitCsv(line);
    if (f.size() < required.size() || f.size() < idx.size()) {
      return LineError(name, lineno, "has " + std::to_string(f.size()) + " columns, the header " +
                                         std::to_string(idx.size()));
    }
    auto col = [&](const char* c) -> const std::string& {
      auto it = idx.find(c);
      return it == idx.end() ? kEmpty : f[it->second];
    };
    Status st = row(lineno, col);
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

Status BadField(const std::string& name, int line, const std::string& field,
                const std::string& value, const std::string& want) {
  return LineError(name, line, field + " \"" + value + "\" is not " + want);
}

void Normalize(std::vector<TraceJob>& jobs) {
  int64_t first = INT64_MAX;
  for (const auto& j : jobs) first = std::min(first, j.submit_s);
  for (auto& j : jobs) j.submit_s -= first;
}

Result<Trace> LoadCsv(std::istream& in, const std::string& name) {
  Trace t;
  Status st = ReadCsv(in, name, {"submit_time", "duration", "gpus"}, [&](int line, auto col) {
    TraceJob j;
    j.id = "t" + std::to_string(t.jobs.size() + 1);
    if (!ParseSeconds(col("submit_time"), &j.submit_s)) {
      return BadField(name, line, "submit_time", col("submit_time"), "a number of seconds");
    }
    if (!ParseSeconds(col("duration"), &j.duration_s)) {
      return BadField(name, line, "duration", col("duration"), "a number of seconds");
    }
    if (!ParseCount(col("gpus"), &j.gpus)) {
      return BadField(name, line, "gpus", col("gpus"), "a positive count");
    }
    j.account = col("account");
    j.gpu_types = SplitTypes(col("gpu_type"));
    if (!col("walltime").empty() && !ParseSeconds(col("walltime"), &j.walltime_s)) {
      return BadField(name, line, "walltime", col("walltime"), "a number of seconds");
    }
    t.jobs.push_back(std::move(j));
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return t;
}

Result<Trace> LoadPhilly(std::istream& in, const std::string& name) {
  Trace t;
  Status st = ReadCsv(in, name, {"timestamp", "duration", "num_gpus", "cluster"}, [&](int line, auto col) {
    struct tm tm {};
    const char* end = strptime(col("timestamp").c_str(), "%Y-%m-%d %H:%M:%S", &tm);
    if (!end || *end != '\0') {
      return BadField(name, line, "timestamp", col("timestamp"), "YYYY-MM-DD HH:MM:SS");
    }
    TraceJob j;
    j.id = "p" + std::to_string(line - 1);
    j.submit_epoch_s = static_cast<int64_t>(timegm(&tm));
    j.submit_s = j.submit_epoch_s;
    if (!ParseSeconds(col("duration"), &j.duration_s)) {
      return BadField(name, line, "duration", col("duration"), "a number of seconds");
    }
    if (!ParseCount(col("num_gpus"), &j.gpus)) {
      return BadField(name, line, "num_gpus", col("num_gpus"), "a positive count");
    }
    j.account = col("cluster");
    t.jobs.push_back(std::move(j));
    return Status::Ok();
  });
  if (!st.ok()) return st;
  Normalize(t.jobs);
  return t;
}

// tiresias: job_id,num_gpu,submit_time,...,duration; chronus adds user.
Result<Trace> LoadTiresiasLike(std::istream& in, const std::string& name, bool chronus) {
  Trace t;
  int no_gpu = 0;
  std::vector<std::string> required = {"job_id", "num_gpu", "submit_time", "duration"};
  if (chronus) required.push_back("user");
  Status st = ReadCsv(in, name, required, [&](int line, auto col) {
    TraceJob j;
    j.id = "job" + col("job_id");
    if (!ParseSeconds(col("submit_time"), &j.submit_s)) {
      return BadField(name, line, "submit_time", col("submit_time"), "a number of seconds");
    }
    if (!ParseSeconds(col("duration"), &j.duration_s)) {
      return BadField(name, line, "duration", col("duration"), "a number of seconds");
    }
    if (!ParseCount(col("num_gpu"), &j.gpus, true)) {
      return BadField(name, line, "num_gpu", col("num_gpu"), "a count");
    }
    if (j.gpus == 0) {
      ++no_gpu;
      return Status::Ok();
    }
    j.account = col("user");
    t.jobs.push_back(std::move(j));
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (no_gpu > 0) t.notes.push_back(std::to_string(no_gpu) + " rows with num_gpu 0: not GPU jobs");
  return t;
}

Result<Trace> LoadAlibabaOpenb(std::istream& in, const std::string& name) {
  Trace t;
  int cpu_only = 0, fractional = 0, unscheduled = 0;
  Status st = ReadCsv(
      in, name, {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time",
                 "scheduled_time", "deletion_time"},
      [&](int line, auto col) {
        TraceJob j;
        j.id = col("name");
        double cpu_milli = 0, milli = 0;
        int64_t created = 0, scheduled = 0, deleted = 0;
        if (!ParseCount(col("num_gpu"), &j.gpus, true)) {
          return BadField(name, line, "num_gpu", col("num_gpu"), "a count");
        }
        if (!ParseNumber(col("cpu_milli"), &cpu_milli)) {
          return BadField(name, line, "cpu_milli", col("cpu_milli"), "a number");
        }
        if (!ParseNumber(col("gpu_milli"), &milli)) {
          return BadField(name, line, "gpu_milli", col("gpu_milli"), "a number");
        }
        double mem = 0;
        if (!ParseNumber(col("memory_mib"), &mem)) {
          return BadField(name, line, "memory_mib", col("memory_mib"), "a number");
        }
        if (!ParseSeconds(col("creation_time"), &created)) {
          return BadField(name, line, "creation_time", col("creation_time"), "a number of seconds");
        }
        if (col("scheduled_time").empty() || col("deletion_time").empty()) {
          ++unscheduled;
          return Status::Ok();
        }
        if (!ParseSeconds(col("scheduled_time"), &scheduled) ||
            !ParseSeconds(col("deletion_time"), &deleted)) {
          return LineError(name, line, "scheduled_time and deletion_time must be seconds");
        }
        if (j.gpus == 0) {
          ++cpu_only;
          return Status::Ok();
        }
        if (j.gpus == 1 && milli > 0 && milli < 1000) {
          j.fractional = true;
          ++fractional;
        }
        j.submit_s = created;
        j.duration_s = std::max<int64_t>(1, deleted - std::max(scheduled, created));
        j.cpus = cpu_milli / 1000.0;
        j.memory_mb = static_cast<int64_t>(mem);
        j.gpu_types = SplitTypes(col("gpu_spec"));
        t.jobs.push_back(std::move(j));
        return Status::Ok();
      });
  if (!st.ok()) return st;
  Normalize(t.jobs);
  if (cpu_only) t.notes.push_back(std::to_string(cpu_only) + " pods without GPUs: not GPU jobs, left out");
  if (unscheduled) t.notes.push_back(std::to_string(unscheduled) + " pods never scheduled or deleted: no run time, left out");
  if (fractional) {
    t.notes.push_back(std::to_string(fractional) +
                      " pods asked for a fraction of one GPU: GPU sharing is not modelled, each "
                      "runs on a whole GPU");
  }
  return t;
}

}  // namespace

std::string CanonicalModel(const std::string& model) {
  std::string out;
  std::string s = model.substr(0, model.find('-'));
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::toupper(c));
  }
  return out;
}

bool KnownTraceFormat(const std::string& f) {
  return f == "csv" || f == "philly" || f == "tiresias" || f == "chronus" || f == "alibaba-openb";
}

Result<Trace> LoadTrace(std::istream& in, const std::string& name, const std::string& format) {
  if (format == "csv") return LoadCsv(in, name);
  if (format == "philly") return LoadPhilly(in, name);
  if (format == "tiresias") return LoadTiresiasLike(in, name, false);
  if (format == "chronus") return LoadTiresiasLike(in, name, true);
  if (format == "alibaba-openb") return LoadAlibabaOpenb(in, name);
  return Status::InvalidArgument("unknown trace format \"" + format +
                                     "\": use csv, philly, tiresias, chronus or alibaba-openb",
                                 "format");
}

Result<std::vector<NodeView>> ParseCluster(const std::string& spec) {
  std::vector<NodeView> nodes;
  std::stringstream ss(spec);
  std::string part;
  int n = 0;
  while (std::getline(ss, part, ',')) {
    std::string shape = part, model = "GPU";
    int64_t mem_mb = 32 * 1024;
    int64_t price = 0;
    if (auto at = part.find('@'); at != std::string::npos) {
      std::string text = part.substr(at + 1);
      char* end = nullptr;
      double credits = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !std::isfinite(credits) || credits < 0 || credits > 1e6) {
        return Status::InvalidArgument("bad price \"" + text + "\" in \"" + part +
                                           "\": credits per GPU-hour, e.g. 352x8:V100@2.5",
                                       "cluster");
      }
      price = std::llround(credits * 1e6);
      shape = part = part.substr(0, at);
    }
    if (auto colon = part.find(':'); colon != std::string::npos) {
      shape = part.substr(0, colon);
      model = part.substr(colon + 1);
      auto dash = model.rfind('-');
      if (dash != std::string::npos && model.size() > dash + 3 &&
          model.compare(model.size() - 2, 2, "GB") == 0) {
        int gb = 0;
        if (!ParseCount(model.substr(dash + 1, model.size() - dash - 3), &gb)) {
          return Status::InvalidArgument("bad GPU memory in \"" + part + "\"", "cluster");
        }
        mem_mb = static_cast<int64_t>(gb) * 1024;
      }
      if (model.empty()) return Status::InvalidArgument("empty GPU model in \"" + part + "\"", "cluster");
    }
    auto x = shape.find('x');
    int count = 0, gpus = 0;
    if (x == std::string::npos || !ParseCount(shape.substr(0, x), &count) ||
        !ParseCount(shape.substr(x + 1), &gpus) || gpus > 64 || count > 1'000'000) {
      return Status::InvalidArgument(
          "bad cluster part \"" + part + "\": use NODESxGPUS[:MODEL][@PRICE], e.g. 352x8:V100@2.5",
          "cluster");
    }
    for (int i = 0; i < count; ++i) {
      NodeView v;
      char id[16];
      snprintf(id, sizeof(id), "n%05d", ++n);
      v.id = v.name = id;
      v.price = price;
      for (int g = 0; g < gpus; ++g) v.gpus.push_back({g, CanonicalModel(model), mem_mb, true});
      nodes.push_back(std::move(v));
    }
  }
  if (nodes.empty()) return Status::InvalidArgument("cluster has no nodes", "cluster");
  return nodes;
}

Result<std::vector<NodeView>> LoadCluster(std::istream& in, const std::string& name) {
  std::string header;
  if (!std::getline(in, header)) return LineError(name, 1, "empty file");
  if (!header.empty() && header.back() == '\r') header.pop_back();
  std::vector<NodeView> nodes;
  std::stringstream rest;
  rest << header << "\n" << in.rdbuf();
  auto add = [&](const std::string& id, int gpus, const std::string& model, double cpus,
                 int64_t mem) {
    NodeView v;
    v.id = v.name = id;
    for (int g = 0; g < gpus; ++g) v.gpus.push_back({g, model, 32 * 1024, true});
    v.cpus = v.cpus_free = cpus;
    v.memory_mb = v.memory_free_mb = mem;
    nodes.push_back(std::move(v));
    return &nodes.back();
  };
  Status st;
  if (header == "vc,node num") {
    st = ReadCsv(rest, name, {"vc", "node num"}, [&](int line, auto col) {
      int count = 0;
      if (!ParseCount(col("node num"), &count)) {
        return BadField(name, line, "node num", col("node num"), "a positive count");
      }
      for (int i = 0; i < count; ++i) {
        NodeView* v = add(col("vc") + "-" + std::to_string(i + 1), 8, "GPU", 96, 0);
        v->labels["vc"] = col("vc");
      }
      return Status::Ok();
    });
  } else if (header.rfind("sn,cpu_milli,memory_mib,gpu,model", 0) == 0) {
    st = ReadCsv(rest, name, {"sn", "cpu_milli", "memory_mib", "gpu", "model"}, [&](int line, auto col) {
      int gpus = 0;
      double cpu = 0, mem = 0;
      if (!ParseCount(col("gpu"), &gpus, true)) {
        return BadField(name, line, "gpu", col("gpu"), "a count");
      }
      if (!ParseNumber(col("cpu_milli"), &cpu) || !ParseNumber(col("memory_mib"), &mem)) {
        return LineError(name, line, "cpu_milli and memory_mib must be numbers");
      }
      if (gpus > 0) add(col("sn"), gpus, CanonicalModel(col("model")), cpu / 1000, static_cast<int64_t>(mem));
      return Status::Ok();
    });
  } else {
    return LineError(name, 1,
                     "unknown cluster file: expected a header \"vc,node num\" (Philly VCs) or "
                     "\"sn,cpu_milli,memory_mib,gpu,model\" (Alibaba openb nodes)");
  }
  if (!st.ok()) return st;
  if (nodes.empty()) return Status::InvalidArgument(name + ": no GPU nodes", "cluster");
  return nodes;
}

std::vector<NodeView> ScaleCluster(const std::vector<NodeView>& nodes, double fraction) {
  std::map<std::string, std::vector<const NodeView*>> groups;
  for (const auto& n : nodes) {
    auto vc = n.labels.find("vc");
    std::string key = (vc == n.labels.end() ? "" : vc->second) + "/" +
                      (n.gpus.empty() ? "" : n.gpus[0].model) + "/" + std::to_string(n.gpus.size());
    groups[key].push_back(&n);
  }
  std::vector<NodeView> out;
  for (auto& [key, members] : groups) {
    auto keep = std::max<size_t>(1, static_cast<size_t>(std::llround(fraction * static_cast<double>(members.size()))));
    for (size_t i = 0; i < keep && i < members.size(); ++i) out.push_back(*members[i]);
  }
  return out;
}

}  // namespace tide::sched::replay
