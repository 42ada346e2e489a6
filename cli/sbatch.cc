// `tide sbatch`: runs an existing Slurm batch script unchanged. The
// translation is api::PlanSbatch (api/sbatch.h); this command reads the
// script, prints the plan's warnings, uploads the script as the job's code
// archive and submits the job, or for --array the batch.
#include <stdlib.h>

#include <filesystem>
#include <iostream>

#include "api/batch.h"
#include "api/client.h"
#include "api/sbatch.h"
#include "cli/common.h"
#include "common/archive.h"
#include "common/paths.h"

namespace tide::cli {

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
      if (api::SbatchOptionTakesNextWord(w) && i + 1 < args.rest.size()) {
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
  auto plan = api::PlanSbatch(*text, script_path, options, script_args);
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
    api::BatchSpec batch = plan->batch;
    batch.job_template["code"] = *code;
    auto answer = (*client)->Call("POST", "/v1/batches", api::ToJson(batch), 300'000);
    if (!answer.ok()) return PrintError(answer.status());
    id = JsonString(*answer, "id");
  } else {
    api::JobSpec spec = plan->spec;
    spec.code = *code;
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
