// `tide submit [SPEC_FILE] [flags] [-- COMMAND ARGS...]`: submits one job.
//
// The spec is built as JSON: the spec file (YAML or JSON) if given, then the
// flags over it, then the command after "--". The result is read into a
// typed api::JobSpec by the server's own validator before it is sent, so a
// mistake in the file is reported with its line ("job.yaml:7:
// resources.gpu_count: must be at least 1") and one in the flags names the
// field. `--code DIR` packs DIR (cli/code.h: without .git and what .gitignore
// names), uploads it and sets "code" to the archive id.
#include "cli/job_submit.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>

#include "api/sbatch.h"
#include "api/spec_file.h"
#include "api/types.h"
#include "cli/code.h"
#include "cli/common.h"
#include "common/paths.h"

namespace tide::cli {

namespace {

using nlohmann::json;

struct SubmitOptions {
  std::string spec_file;
  SubmitFlags flags;
  std::string code_dir;
  std::string idempotency_key;
  bool quiet = false;
  OutputFormat format = OutputFormat::kTable;
};

// Returns spec[key], creating an empty object there; fails if something else is there.
Result<json*> ObjectField(json* spec, const std::string& key) {
  if (!spec->contains(key) || (*spec)[key].is_null()) (*spec)[key] = json::object();
  if (!(*spec)[key].is_object()) return Status::InvalidArgument("must be a mapping", key);
  return &(*spec)[key];
}

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string part = s.substr(start, end - start);
    part.erase(0, part.find_first_not_of(' '));
    part.erase(part.find_last_not_of(' ') + 1);
    if (!part.empty()) out.push_back(part);
    start = end + 1;
  }
  return out;
}

// "spec.yaml:7: " for `field` (or its nearest parent with a line), or "spec.yaml: ".
std::string WhereInFile(const api::SpecDocument& doc, const std::string& file, std::string field) {
  while (!field.empty()) {
    auto it = doc.lines.find(field);
    if (it != doc.lines.end()) return file + ":" + std::to_string(it->second) + ": ";
    size_t cut = field.find_last_of(".[");
    field = cut == std::string::npos ? "" : field.substr(0, cut);
  }
  return file + ": ";
}

// True if `field` is, or lies under, a field the flags wrote.
bool SetByFlag(const std::vector<std::string>& set_fields, const std::string& field) {
  return std::any_of(set_fields.begin(), set_fields.end(), [&](const std::string& f) {
    return field == f || field.rfind(f + ".", 0) == 0 || field.rfind(f + "[", 0) == 0;
  });
}

// Reads the spec file (if any), writes the flags over it and checks the
// result as the server will: errors name the file's line or the flag.
Result<api::JobSpec> BuildSpec(const SubmitOptions& opts) {
  json spec = json::object();
  api::SpecDocument doc;
  if (!opts.spec_file.empty()) {
    auto text = ReadFile(opts.spec_file);
    if (!text.ok()) return text.status();
    auto parsed = api::ParseYamlDocument(*text, opts.spec_file);
    if (!parsed.ok()) return parsed.status();
    doc = std::move(parsed).value();
    if (doc.value.is_null()) doc.value = json::object();  // an empty file
    if (!doc.value.is_object()) {
      return Status::InvalidArgument(opts.spec_file + ": a job spec must be a mapping of fields");
    }
    spec = doc.value;
  }
  std::vector<std::string> set_fields;
  Status merged = MergeSubmitFlags(opts.flags, &spec, &set_fields);
  if (!merged.ok()) {
    if (opts.spec_file.empty()) return merged;
    return Status::InvalidArgument(
        WhereInFile(doc, opts.spec_file, merged.field()) + merged.field() + ": " + merged.message(),
        merged.field());
  }
  auto checked = api::JobSpecFromJson(spec);
  if (!checked.ok() && !opts.spec_file.empty()) {
    const Status& st = checked.status();
    std::string what = (st.field().empty() ? "" : st.field() + ": ") + st.message();
    if (SetByFlag(set_fields, st.field())) return Status::InvalidArgument(what, st.field());
    return Status::InvalidArgument(WhereInFile(doc, opts.spec_file, st.field()) + what,
                                   st.field());
  }
  return checked;
}

int RunSubmit(SubmitOptions opts) {
  opts.flags.command = TrailingArgs();
  if (opts.spec_file.empty() && opts.flags.command.empty()) {
    std::cerr << "error: nothing to run: give a spec file or a command after \"--\"\n"
              << "usage: tide submit [SPEC_FILE] [flags] [-- COMMAND ARGS...]\n";
    return kExitUsage;
  }
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());

  if (!opts.code_dir.empty()) {
    auto packed = PackCode(opts.code_dir);
    if (!packed.ok()) return PrintError(packed.status().WithContext("pack " + opts.code_dir));
    auto id = (*client)->UploadCode(packed->archive);
    if (!id.ok()) return PrintError(id.status().WithContext("upload " + opts.code_dir));
    if (!opts.quiet) {
      std::cerr << "Uploaded " << opts.code_dir << " (" << FormatBytes(packed->archive.size()) << ")\n";
    }
    opts.flags.code = *id;
  }
  auto spec = BuildSpec(opts);
  if (!spec.ok()) return PrintError(spec.status());

  auto job = (*client)->SubmitJob(*spec, opts.idempotency_key);
  if (!job.ok()) return PrintError(job.status());

  if (opts.format == OutputFormat::kJson) {
    // The server's record has every field, including ones this client does not know.
    auto raw = (*client)->Call("GET", "/v1/jobs/" + api::UrlEncode(job->id));
    PrintJson(raw.ok() ? *raw : api::ToJson(*job));
    return kExitOk;
  }
  if (opts.quiet) {
    std::cout << job->id << "\n";
    return kExitOk;
  }
  std::cout << "Submitted job " << job->id << "\n";
  std::string line = std::string("status: ") + api::JobStatusName(job->status);
  if (!job->pending_reason.empty()) {
    line += " (" + job->pending_reason + ")";
    if (job->pending_reason_provisional) {
      line += "\n  provisional: the next scheduling pass ranks it; `tide queue` shows where";
    }
  } else if (!job->reason.empty()) {
    line += " (" + job->reason + ")";
  }
  std::cout << line << "\n";
  return kExitOk;
}

}  // namespace

Result<std::pair<std::string, std::string>> ParseEnvAssignment(std::string_view text,
                                                               std::string_view flag) {
  size_t eq = text.find('=');
  std::string key(text.substr(0, eq));
  const std::string f(flag);
  bool ok = !key.empty() && !std::isdigit(static_cast<unsigned char>(key[0]));
  for (char c : key) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!ok) {
    const std::string shown = f == "--secret" ? key : std::string(text);
    return Status::InvalidArgument(f + " \"" + shown +
                                   "\": expected NAME=VALUE with NAME of letters, digits and _");
  }
  if (eq != std::string_view::npos) return std::make_pair(key, std::string(text.substr(eq + 1)));
  const char* value = std::getenv(key.c_str());
  if (value == nullptr) {
    return Status::InvalidArgument(f + " " + key + ": not set in this environment (use " + key +
                                   "=VALUE)");
  }
  return std::make_pair(key, std::string(value));
}

Status MergeSubmitFlags(const SubmitFlags& flags, json* spec,
                        std::vector<std::string>* set_fields) {
  std::vector<std::string> ignored;
  std::vector<std::string>& set = set_fields ? *set_fields : ignored;
  auto put = [&](const std::string& key, json value) {
    (*spec)[key] = std::move(value);
    set.push_back(key);
  };
  if (!flags.name.empty()) put("name", flags.name);
  if (!flags.image.empty()) put("image", flags.image);
  if (!flags.max_runtime.empty()) put("max_runtime", flags.max_runtime);
  if (!flags.grace.empty()) put("grace", flags.grace);
  if (flags.spot && !flags.tier.empty() && flags.tier != "spot") {
    return Status::InvalidArgument("--spot contradicts --tier " + flags.tier, "tier");
  }
  if (!flags.tier.empty()) put("tier", flags.tier);
  if (flags.spot) put("tier", "spot");
  if (flags.priority) put("priority", *flags.priority);
  if (flags.max_cost) put("max_cost", *flags.max_cost);
  if (flags.max_price) put("max_price", *flags.max_price);
  if (!flags.depends_on.empty()) {
    std::vector<api::JobSpec::Dependency> deps;
    Status parsed = api::ParseSlurmDependency(flags.depends_on, /*bare_id_is_afterok=*/true, &deps);
    if (!parsed.ok()) {
      return Status::InvalidArgument("--depends-on " + flags.depends_on + ": " + parsed.message(),
                                     "depends_on");
    }
    json list = json::array();
    for (const auto& d : deps) list.push_back({{"job", d.job}, {"condition", d.condition}});
    put("depends_on", list);
  }
  if (flags.retry_times) put("retry_times", *flags.retry_times);
  if (flags.network) put("network", true);
  if (!flags.code.empty()) put("code", flags.code);
  if (!flags.command.empty()) put("command", flags.command);

  if (flags.gpus || flags.nodes || !flags.gpu_type.empty() || !flags.gpu_memory.empty() || flags.cpus ||
      !flags.memory.empty()) {
    auto res = ObjectField(spec, "resources");
    if (!res.ok()) return res.status();
    json& r = **res;
    auto put_res = [&](const std::string& key, json value) {
      r[key] = std::move(value);
      set.push_back("resources." + key);
    };
    if (flags.gpus) put_res("gpu_count", *flags.gpus);
    if (flags.nodes) put_res("nodes", *flags.nodes);
    if (!flags.gpu_type.empty()) {
      std::vector<std::string> types = SplitCommas(flags.gpu_type);
      if (types.size() == 1) {
        put_res("gpu_type", types[0]);
      } else {
        put_res("gpu_type", types);
      }
    }
    if (!flags.gpu_memory.empty()) put_res("gpu_memory", flags.gpu_memory);
    if (flags.cpus) put_res("cpus", *flags.cpus);
    if (!flags.memory.empty()) put_res("memory", flags.memory);
  }

  if (!flags.constraints.empty()) {
    auto labels = ObjectField(spec, "constraints");
    if (!labels.ok()) return labels.status();
    for (const auto& c : flags.constraints) {
      size_t eq = c.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == c.size()) {
        return Status::InvalidArgument(
            "--constraint \"" + c + "\": expected KEY=VALUE (a node label, e.g. partition=gpu)",
            "constraints");
      }
      std::string key = c.substr(0, eq);
      (**labels)[key] = c.substr(eq + 1);
      set.push_back("constraints." + key);
    }
  }

  if (!flags.env.empty()) {
    auto env = ObjectField(spec, "env");
    if (!env.ok()) return env.status();
    for (const auto& assignment : flags.env) {
      auto kv = ParseEnvAssignment(assignment);
      if (!kv.ok()) return kv.status();
      (**env)[kv->first] = kv->second;
      set.push_back("env." + kv->first);
    }
  }

  // A secret left null in the file ("secrets: {HF_TOKEN: null}") is one
  // these flags are to fill in.
  if (!flags.secrets.empty()) {
    auto secrets = ObjectField(spec, "secrets");
    if (!secrets.ok()) return secrets.status();
    for (const auto& assignment : flags.secrets) {
      auto kv = ParseEnvAssignment(assignment, "--secret");
      if (!kv.ok()) return kv.status();
      (**secrets)[kv->first] = kv->second;
      set.push_back("secrets." + kv->first);
    }
  }

  if (!flags.tags.empty()) {
    if (!spec->contains("tags") || (*spec)["tags"].is_null()) (*spec)["tags"] = json::array();
    json& tags = (*spec)["tags"];
    if (!tags.is_array()) return Status::InvalidArgument("must be a list", "tags");
    for (const auto& t : flags.tags) {
      if (std::find(tags.begin(), tags.end(), json(t)) != tags.end()) continue;
      tags.push_back(t);
      set.push_back("tags[" + std::to_string(tags.size() - 1) + "]");
    }
  }
  return Status::Ok();
}

void AddJobFlags(CLI::App* cmd, std::shared_ptr<SubmitFlags> flags) {
  SubmitFlags& f = *flags;
  cmd->add_option_function<int>(
      "--gpus", [flags](int n) { flags->gpus = n; }, "Number of GPUs (per node; default 1)");
  cmd->add_option_function<int>(
      "-N,--nodes", [flags](int n) { flags->nodes = n; },
      "Run on this many nodes at once (a gang; torchrun-ready environment)");
  cmd->add_option("--gpu-type", f.gpu_type, "GPU model, or a comma list of acceptable models");
  cmd->add_option("--gpu-memory", f.gpu_memory, "Minimum memory per GPU, e.g. 24GB");
  cmd->add_option_function<double>(
      "--cpus", [flags](double n) { flags->cpus = n; }, "CPUs");
  cmd->add_option("--memory", f.memory, "Host memory, e.g. 64GB");
  cmd->add_option("--image", f.image, "Container image (default: host)");
  cmd->add_option("--max-runtime", f.max_runtime, "Stop the job after this long, e.g. 2h");
  cmd->add_option("--grace", f.grace, "Notice before a stop turns into a kill, e.g. 30s");
  cmd->add_option("--tier", f.tier, "on-demand, or spot (cheaper, preemptible)")
      ->check(CLI::IsMember({"on-demand", "spot"}));
  cmd->add_flag("--spot", f.spot, "Run as spot work (same as --tier spot)");
  cmd->add_option_function<int>(
         "--priority", [flags](int n) { flags->priority = n; },
         "Order among your own jobs, -1000..1000 (higher first; default 0)")
      ->check(CLI::Range(-api::kMaxPriority, api::kMaxPriority));
  cmd->add_option("--constraint", f.constraints,
                  "Node label the node must have, KEY=VALUE (repeatable), e.g. partition=gpu")
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option_function<double>(
      "--max-price", [flags](double p) { flags->max_price = p; },
      "Highest price to pay, credits per GPU-hour");
  cmd->add_option_function<double>(
      "--max-cost", [flags](double c) { flags->max_cost = c; },
      "Most the whole job may cost, credits (the hold is at most this)");
  cmd->add_option("--depends-on", f.depends_on,
                  "Start after other jobs: ID (afterok), or afterok:ID[:ID],afterany:ID,afternotok:ID");
  cmd->add_option("--retry-times", f.retry_times, "Run a failed job again, up to this many times")
      ->check(CLI::Range(0, api::kMaxRetryTimes));
  cmd->add_flag("--network", f.network,
                "Give the job outbound network (it has only its own loopback without)");
  cmd->add_option("-e,--env", f.env, "Environment variable NAME=VALUE (or NAME to copy it)")
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("--secret", f.secrets,
                  "Secret NAME=VALUE, or NAME to take it from this environment (repeatable): "
                  "given to the job as environment, never shown, masked in its log")
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("-t,--tag", f.tags, "Tag (repeatable)")->allow_extra_args(false)->take_all();
}

void AddSubmitCommand(CLI::App& app) {
  auto opts = std::make_shared<SubmitOptions>();
  CLI::App* cmd = app.add_subcommand("submit", "Submit a job from a spec file and/or flags");
  cmd->footer(
      "Flags override the spec file. The command to run follows \"--\":\n"
      "  tide submit --gpus 2 --gpu-type RTX4090 -- python train.py --lr 3e-4\n"
      "  tide submit job.yaml --name sweep-7 --env LR=0.1 --code .\n"
      "  tide submit --constraint partition=gpu --max-price 0.5 --depends-on j-1 -- ./eval.sh");
  cmd->add_option("spec_file", opts->spec_file, "Job spec, YAML or JSON")->check(CLI::ExistingFile);
  cmd->add_option("--name", opts->flags.name, "Job name");
  AddJobFlags(cmd, std::shared_ptr<SubmitFlags>(opts, &opts->flags));
  cmd->add_option("--code", opts->code_dir, "Directory to pack and upload as the job's code")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--idempotency-key", opts->idempotency_key,
                  "Submitting twice with the same key creates one job");
  cmd->add_flag("-q,--quiet", opts->quiet, "Print only the job id");
  AddOutputFlag(cmd, &opts->format);
  SetAction(cmd, [opts] { return RunSubmit(*opts); });
}

}  // namespace tide::cli
