// sbatch translation (sbatch.h): directives in, a typed job or batch out.
#include "api/sbatch.h"

#include "api/sbatch_options.h"
#include "common/utf8.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

namespace tide::api {

using namespace sbatch;

namespace {

// The directives in force: the last of each option wins, the command line
// comes last. Failures and warnings name the line an option came from.
class Directives {
 public:
  Directives(std::string file, const std::vector<Opt>& opts) : file_(std::move(file)) {
    for (const auto& o : opts) last_[o.name] = o;
  }
  const Opt* get(const std::string& name) const {
    auto it = last_.find(name);
    return it == last_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, Opt>& all() const { return last_; }
  std::string where(const Opt& o) const { return Where(file_, o.line); }
  const std::string& file() const { return file_; }
  Status Fail(const Opt& o, const std::string& why) const {
    return Status::InvalidArgument(where(o) + ": --" + o.name + ": " + why);
  }
  std::string Warning(const Opt& o, const std::string& why) const {
    return where(o) + ": --" + o.name + ": " + why;
  }

 private:
  std::string file_;
  std::map<std::string, Opt> last_;
};

// #SBATCH lines before the first command, then the command line.
Result<std::vector<Opt>> ReadDirectives(const std::string& script, const std::string& filename,
                                        const std::vector<std::string>& cli_options) {
  if (script.rfind("#!", 0) != 0) {
    return Status::InvalidArgument(filename + ":1: this does not look like a batch script: the first "
                                   "line must start with #! and the path of an interpreter (as for sbatch)");
  }
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
  return opts;
}

// "[TYPE:]COUNT" of --gres=gpu:..., --gpus-per-node and --gpus.
Status TypedCount(const Directives& d, const Opt& o, const std::string& value, int* count,
                  std::vector<std::string>* gpu_types) {
  size_t colon = value.rfind(':');
  std::string n = colon == std::string::npos ? value : value.substr(colon + 1);
  if (colon != std::string::npos) {
    std::string type = value.substr(0, colon);
    std::string canonical = CanonicalGpuModel(type);
    if (canonical.empty()) return d.Fail(o, "\"" + type + "\" is not a GPU model");
    gpu_types->clear();
    if (canonical != "ANY") gpu_types->push_back(canonical);
  }
  auto c = PositiveInt(n, "--" + o.name);
  if (!c.ok()) return d.Fail(o, "\"" + value + "\" is not [TYPE:]COUNT");
  *count = *c;
  return Status::Ok();
}

// --nodes, the GPUs, the tasks, --cpus-per-task and the memory.
Status PlanResources(const Directives& d, Resources* res, std::map<std::string, std::string>* env,
                     std::vector<std::string>* warnings) {
  if (const Opt* o = d.get("nodes")) {
    auto n = PositiveInt(o->value, "--nodes");
    if (!n.ok()) return d.Fail(*o, "must be one number of nodes (a range like 2-4 cannot be honoured)");
    res->nodes = *n;
  }
  int gpus_per_node = 0;
  if (const Opt* o = d.get("gres")) {
    std::string v = o->value;
    if (v.rfind("gpu", 0) != 0) return d.Fail(*o, "only gpu[:TYPE]:COUNT resources exist here");
    v = v.substr(3);
    if (v.empty()) {
      gpus_per_node = 1;
    } else if (v[0] != ':') {
      return d.Fail(*o, "\"" + o->value + "\" is not gpu[:TYPE]:COUNT");
    } else {
      TIDE_RETURN_IF_ERROR(TypedCount(d, *o, v.substr(1), &gpus_per_node, &res->gpu_types));
    }
  }
  if (const Opt* o = d.get("gpus-per-node")) {
    TIDE_RETURN_IF_ERROR(TypedCount(d, *o, o->value, &gpus_per_node, &res->gpu_types));
  }
  if (const Opt* o = d.get("gpus")) {
    int total = 0;
    TIDE_RETURN_IF_ERROR(TypedCount(d, *o, o->value, &total, &res->gpu_types));
    if (total % res->nodes != 0) {
      return d.Fail(*o, std::to_string(total) + " GPUs do not split evenly over " +
                            std::to_string(res->nodes) + " nodes");
    }
    gpus_per_node = total / res->nodes;
  }
  res->gpu_count = gpus_per_node > 0 ? gpus_per_node : 1;
  if (gpus_per_node == 0) {
    warnings->push_back("no GPUs asked for (--gpus, --gres=gpu:N): the job gets 1 GPU, the least Tide places");
  }

  int tasks_per_node = 1;
  if (const Opt* o = d.get("ntasks-per-node")) {
    auto n = PositiveInt(o->value, "--ntasks-per-node");
    if (!n.ok()) return d.Fail(*o, "must be a positive number");
    tasks_per_node = *n;
  }
  int64_t ntasks = 0;
  if (d.get("ntasks-per-node") != nullptr) {
    ntasks = static_cast<int64_t>(tasks_per_node) * res->nodes;
    (*env)["SLURM_NTASKS_PER_NODE"] = std::to_string(tasks_per_node);
  }
  if (const Opt* o = d.get("ntasks")) {
    auto n = PositiveInt(o->value, "--ntasks");
    if (!n.ok()) return d.Fail(*o, "must be a positive number");
    if (*n > res->nodes) tasks_per_node = std::max(tasks_per_node, (*n + res->nodes - 1) / res->nodes);
    ntasks = *n;
  }
  // What srun starts when not told otherwise (the agent's default is one
  // task per node).
  if (ntasks > 0) (*env)["SLURM_NTASKS"] = (*env)["SLURM_NPROCS"] = std::to_string(ntasks);
  if (const Opt* o = d.get("cpus-per-task")) {
    auto n = PositiveInt(o->value, "--cpus-per-task");
    if (!n.ok()) return d.Fail(*o, "must be a positive number");
    if (static_cast<int64_t>(*n) * tasks_per_node > 100'000) return d.Fail(*o, "is more CPUs than any node has");
    res->cpus = *n * tasks_per_node;
  }
  // The first of --mem, --mem-per-cpu, --mem-per-gpu given, and what it is per.
  const std::pair<const char*, int64_t> kMemory[] = {
      {"mem", 1},
      {"mem-per-cpu", static_cast<int64_t>(std::max(1.0, res->cpus))},
      {"mem-per-gpu", res->gpu_count},
  };
  for (const auto& [name, times] : kMemory) {
    const Opt* o = d.get(name);
    if (o == nullptr) continue;
    auto mb = SlurmMemoryMb(o->value, std::string("--") + name);
    if (!mb.ok()) return d.Fail(*o, mb.status().message());
    res->memory_mb = *mb * times;
    break;
  }
  return Status::Ok();
}

// --time, and --signal, which moves Tide's notice that long before it.
Status PlanTime(const Directives& d, JobSpec* spec) {
  int64_t runtime = 0;
  if (const Opt* o = d.get("time")) {
    auto t = ParseSlurmTime(o->value);
    if (!t.ok()) return d.Fail(*o, t.status().message());
    runtime = *t;
  }
  if (const Opt* o = d.get("signal")) {
    // [{R|B}:]SIG[@SECONDS]: Tide's notice is SIGTERM at the end of
    // max_runtime, then the grace period.
    std::string v = o->value;
    if (v.size() > 2 && (v[0] == 'R' || v[0] == 'B') && v[1] == ':') v = v.substr(2);
    size_t at = v.find('@');
    std::string sig = v.substr(0, at);
    int64_t before = at == std::string::npos ? 60 : 0;
    if (at != std::string::npos) {
      auto n = PositiveInt(v.substr(at + 1), "--signal");
      if (!n.ok()) return d.Fail(*o, "\"" + o->value + "\" is not [B:]SIGNAL[@SECONDS]");
      before = *n;
    }
    if (sig != "TERM" && sig != "SIGTERM" && sig != "15") {
      return d.Fail(*o, "the notice is SIGTERM (and $TIDE_NOTICE_FILE), not " + sig +
                            ": a handler for " + sig + " would never run");
    }
    if (runtime == 0) return d.Fail(*o, "needs --time: the signal comes that long before the time limit");
    if (before >= runtime) return d.Fail(*o, "comes before the job starts (at or over --time)");
    before = std::min<int64_t>(before, 3600);
    runtime -= before;
    spec->grace_s = before;
  }
  spec->max_runtime_s = runtime;
  return Status::Ok();
}

// --dependency=afterok:1:2,afterany:3
Status PlanDependencies(const Directives& d, const Opt& o, JobSpec* spec) {
  Status parsed = ParseSlurmDependency(o.value, /*bare_id_is_afterok=*/false, &spec->depends_on);
  if (!parsed.ok()) return d.Fail(o, parsed.message());
  return Status::Ok();
}

// --job-name, --partition, --dependency and --nice.
Status PlanScheduling(const Directives& d, JobSpec* spec) {
  if (const Opt* o = d.get("job-name")) {
    if (o->value.empty()) return d.Fail(*o, "must not be empty");
    spec->name = o->value;
  }
  if (const Opt* o = d.get("partition")) {
    if (o->value.find(',') != std::string::npos) {
      return d.Fail(*o, "a list of partitions cannot be honoured; give one (it is the node label partition=NAME)");
    }
    std::string why = CheckLabel("partition", o->value);
    if (!why.empty()) return d.Fail(*o, why);
    spec->constraints = {{"partition", o->value}};
  }
  if (const Opt* o = d.get("dependency")) TIDE_RETURN_IF_ERROR(PlanDependencies(d, *o, spec));
  if (const Opt* o = d.get("nice")) {
    try {
      int64_t n = std::stoll(o->value);
      spec->priority = static_cast<int>(std::clamp<int64_t>(-n, -kMaxPriority, kMaxPriority));
    } catch (...) {
      return d.Fail(*o, "must be a number");
    }
  }
  return Status::Ok();
}

// Directives that cannot change the result are warned about; those that
// would are refused.
Status CheckUnsupported(const Directives& d, std::vector<std::string>* warnings) {
  static const std::map<std::string, std::string> kIgnored = {
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
      {"chdir", "ignored: the script runs in $SLURM_SUBMIT_DIR, the job's copy of the directory "
                "tide sbatch uploaded (choose it with --code DIR)"},
      {"requeue", "a job is always requeued after a preemption or a lost node"},
      {"no-requeue", "ignored: a job is always requeued after a preemption or a lost node"},
      {"parsable", ""},
      {"quiet", ""},
      {"verbose", ""},
      {"kill-on-invalid-dep", "a job whose dependency can never be met is always cancelled"},
  };
  static const std::map<std::string, std::string> kRefused = {
      {"constraint", "node features cannot be honoured; use --partition (a node label)"},
      {"nodelist", "cannot pick nodes by name"},
      {"exclude", "cannot exclude nodes by name"},
      {"begin", "a deferred start cannot be honoured"},
      {"deadline", "a deadline cannot be honoured"},
      {"hold", "a held job cannot be honoured"},
      {"reservation", "reservations cannot be honoured"},
      {"licenses", "licenses cannot be honoured"},
      {"gpus-per-task", "give --gpus-per-node or --gres=gpu:N (and srun --gpus-per-task)"},
      {"wait", "use tide wait ID"},
      {"priority", "use --nice"},
  };
  for (const auto& [name, o] : d.all()) {
    if (auto r = kRefused.find(name); r != kRefused.end()) return d.Fail(o, r->second);
    if (auto w = kIgnored.find(name); w != kIgnored.end() && !w->second.empty()) {
      warnings->push_back(d.Warning(o, w->second));
    }
  }
  return Status::Ok();
}

// The command: the script itself, its output also written to the file
// --output names (Slurm's default slurm-%j.out, slurm-%A_%a.out for an
// array) in the job's outputs, its errors to --error's when given.
Result<std::vector<std::string>> PlanCommand(const Directives& d, bool array,
                                             const std::string& script_in_code,
                                             const std::vector<std::string>& script_args,
                                             std::vector<std::string>* warnings) {
  std::string out_pattern = array ? "slurm-%A_%a.out" : "slurm-%j.out";
  int out_line = 0;
  if (const Opt* o = d.get("output")) {
    out_pattern = o->value;
    out_line = o->line;
  }
  const std::string out_where = Where(d.file(), out_line);
  auto out_path = OutputPath(out_pattern, "--output", warnings, out_where);
  if (!out_path.ok()) return out_path.status();
  auto out_expr = PatternExpression(*out_path, out_where + ": --output");
  if (!out_expr.ok()) return out_expr.status();
  std::string wrapper = "cd \"$SLURM_SUBMIT_DIR\" || exit 1\n";
  if (array) wrapper += "export SLURM_ARRAY_JOB_ID=\"$TIDE_BATCH\"\n";
  wrapper += "out=\"$TIDE_OUTPUT_DIR\"/" + *out_expr + "\nmkdir -p \"$(dirname \"$out\")\"\n";
  // tee ignores the notice's SIGTERM so the script's last words are kept.
  const std::string tee = "( trap '' TERM; exec tee -a \"$out\" )";
  if (const Opt* o = d.get("error")) {
    auto err_path = OutputPath(o->value, "--error", warnings, d.where(*o));
    if (!err_path.ok()) return err_path.status();
    auto err_expr = PatternExpression(*err_path, d.where(*o) + ": --error");
    if (!err_expr.ok()) return err_expr.status();
    wrapper += "err=\"$TIDE_OUTPUT_DIR\"/" + *err_expr + "\nmkdir -p \"$(dirname \"$err\")\"\n";
    wrapper += "\"./$0\" \"$@\" 2> >( trap '' TERM; exec tee -a \"$err\" >&2 ) | " + tee +
               "\nexit \"${PIPESTATUS[0]}\"\n";
  } else {
    wrapper += "\"./$0\" \"$@\" 2>&1 | " + tee + "\nexit \"${PIPESTATUS[0]}\"\n";
  }
  std::vector<std::string> command = {"/bin/bash", "-c", wrapper, script_in_code};
  command.insert(command.end(), script_args.begin(), script_args.end());
  return command;
}

// An array: a batch of `spec`, one trial per task, with Slurm's array
// variables. Every string of a batch template is a pattern: braces are
// literal.
Result<BatchSpec> PlanArray(const JobSpec& spec, const std::vector<int>& tasks, int max_concurrent) {
  json tmpl = ToJson(spec);
  for (auto& c : tmpl["command"]) c = EscapeBraces(c.get<std::string>());
  tmpl["name"] = EscapeBraces(spec.name);
  json env = json::object();
  for (const auto& [k, v] : spec.env) env[k] = EscapeBraces(v);
  env["SLURM_ARRAY_TASK_ID"] = "{task}";
  env["SLURM_ARRAY_TASK_COUNT"] = std::to_string(tasks.size());
  env["SLURM_ARRAY_TASK_MIN"] = std::to_string(*std::min_element(tasks.begin(), tasks.end()));
  env["SLURM_ARRAY_TASK_MAX"] = std::to_string(*std::max_element(tasks.begin(), tasks.end()));
  tmpl["env"] = env;
  json jobs = json::array();
  for (int t : tasks) jobs.push_back({{"id", std::to_string(t)}, {"task", t}});
  json batch = {{"experiment_batch", spec.name}, {"template", tmpl}, {"jobs", jobs}};
  if (max_concurrent > 0) batch["max_concurrent"] = max_concurrent;
  return BatchSpecFromJson(batch);
}

}  // namespace

Result<SbatchPlan> PlanSbatch(const std::string& script, const std::string& filename,
                              const std::vector<std::string>& cli_options,
                              const std::vector<std::string>& script_args) {
  for (size_t i = 0; i < script_args.size(); ++i) {
    if (!ValidUtf8(script_args[i])) {
      return Status::InvalidArgument("command line: the script's argument " + std::to_string(i + 1) +
                                     " is not valid UTF-8");
    }
  }
  auto opts = ReadDirectives(script, filename, cli_options);
  if (!opts.ok()) return opts.status();
  const Directives d(filename, *opts);

  SbatchPlan plan;
  plan.parsable = d.get("parsable") != nullptr;
  const std::string base = std::filesystem::path(filename).filename().string();
  JobSpec spec;
  spec.name = base;
  spec.slurm = true;
  TIDE_RETURN_IF_ERROR(PlanResources(d, &spec.resources, &spec.env, &plan.warnings));
  if (spec.resources.nodes > 1) {
    plan.warnings.push_back(
        "--nodes: the script runs on each of the " + std::to_string(spec.resources.nodes) +
        " nodes, not only on the first; srun on each node starts that node's tasks (docs/slurm.md)");
  }
  TIDE_RETURN_IF_ERROR(PlanTime(d, &spec));
  TIDE_RETURN_IF_ERROR(PlanScheduling(d, &spec));
  TIDE_RETURN_IF_ERROR(CheckUnsupported(d, &plan.warnings));

  std::vector<int> tasks;
  int max_concurrent = 0;
  if (const Opt* o = d.get("array")) {
    Status st = ParseSlurmArray(o->value, &tasks, &max_concurrent);
    if (!st.ok()) return d.Fail(*o, st.message());
    plan.array = true;
  }
  plan.script_in_code = std::string(kSbatchScriptDir) + "/" + base;
  auto command = PlanCommand(d, plan.array, plan.script_in_code, script_args, &plan.warnings);
  if (!command.ok()) return command.status();
  spec.command = std::move(*command);

  // The server's own checks, so what is planned submits.
  auto valid = JobSpecFromJson(ToJson(spec));
  if (!valid.ok()) return Status::InvalidArgument(filename + ": " + valid.status().ToString());
  plan.spec = std::move(*valid);
  if (plan.array) {
    auto batch = PlanArray(plan.spec, tasks, max_concurrent);
    if (!batch.ok()) return Status::InvalidArgument(filename + ": " + batch.status().ToString());
    plan.batch = std::move(*batch);
  }
  return plan;
}

bool SbatchOptionTakesNextWord(const std::string& word) {
  if (word.size() < 2 || word[0] != '-') return false;
  // "--opt=value" and "-Xvalue" carry their value.
  if (word.find('=') != std::string::npos || (word[1] != '-' && word.size() > 2)) return false;
  std::string name = word[1] == '-' ? word.substr(2) : "";
  if (word[1] != '-') {
    for (const auto& [n, info] : Options()) {
      if (info.letter == word[1]) name = n;
    }
  }
  auto info = Options().find(name);
  return info != Options().end() && info->second.value;
}

}  // namespace tide::api
