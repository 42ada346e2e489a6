// `tide sbatch`: runs an existing Slurm batch script unchanged. The
// translation is api::PlanSbatch (api/sbatch.h); this command reads the
// script, prints the plan's warnings, uploads the submit directory (the one
// it runs in, or --code DIR; cli/code.h) with the script at the plan's
// script_in_code as the job's code archive and submits the job, or for
// --array the batch.
#include "cli/sbatch.h"

#include <filesystem>
#include <iostream>

#include "api/batch.h"
#include "api/client.h"
#include "api/sbatch.h"
#include "cli/code.h"
#include "cli/common.h"
#include "common/paths.h"

namespace tide::cli {

namespace {

struct SbatchArgs {
  bool parsable = false;
  std::vector<std::string> rest;  // [options...] script [args...]
};

constexpr const char* kUsage =
    "tide sbatch [--code DIR | --no-code] [SBATCH OPTIONS] SCRIPT [ARGS]";

// The script's text; a directory or an unreadable file is refused naming it.
Result<std::string> ReadScript(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::InvalidArgument(path + " is a directory, not a batch script (" + kUsage +
                                   "; --code DIR chooses the directory to upload)");
  }
  auto text = ReadFile(path);
  if (!text.ok()) return Status::InvalidArgument(path + ": " + text.status().message());
  return text;
}

int RunSbatch(const SbatchArgs& args) {
  auto line = ParseSbatchCommandLine(args.rest);
  if (!line.ok()) {
    std::cerr << "error: " << line.status().message() << "\nusage: " << kUsage << "\n";
    return kExitUsage;
  }
  auto text = ReadScript(line->script);
  if (!text.ok()) return PrintError(text.status());
  auto plan = api::PlanSbatch(*text, line->script, line->options, line->script_args);
  if (!plan.ok()) return PrintError(plan.status());
  for (const auto& w : plan->warnings) std::cerr << "warning: " << w << "\n";

  // The submit directory travels as the job's code, the script beside it.
  // The submit directory by its full name in messages, as Slurm reports it.
  std::error_code cwd_error;
  if (!line->code_chosen) line->code_dir = std::filesystem::current_path(cwd_error).string();
  if (cwd_error)
    return PrintError(Status::Internal("the current directory: " + cwd_error.message()));
  CodeOptions code;
  code.extra_files = {{plan->script_in_code, *text}};
  code.skip_other_files = true;
  if (!line->code_chosen) code.max_bytes = kSbatchCodeLimitBytes;
  auto packed = PackCode(line->code_dir, code);
  if (!packed.ok()) {
    Status st = packed.status();
    if (!line->code_chosen && st.code() == Code::kTooLarge) {
      st = Status::TooLarge(
          "tide sbatch uploads the directory it runs in, as $SLURM_SUBMIT_DIR: " + st.message() +
          ". Run it from a smaller directory, choose one with --code DIR (up to what the server "
          "takes), list what to leave out in .gitignore, or give --no-code to upload only the "
          "script");
    } else {
      st = st.WithContext("pack " + (line->code_dir.empty() ? line->script : line->code_dir));
    }
    return PrintError(st);
  }
  if (!packed->skipped.empty()) {
    std::cerr << "warning: left out " << packed->skipped.size() << " symlinks and special files of "
              << line->code_dir << " (first: " << packed->skipped.front() << ")\n";
  }
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto code_id = (*client)->UploadCode(packed->archive);
  if (!code_id.ok()) return PrintError(code_id.status());
  if (!line->code_dir.empty()) {
    std::cerr << "Uploaded " << line->code_dir << " (" << packed->files << " files, "
              << FormatBytes(packed->bytes) << ") as $SLURM_SUBMIT_DIR\n";
  }

  std::string id;
  if (plan->array) {
    api::BatchSpec batch = plan->batch;
    batch.job_template["code"] = *code_id;
    auto answer = (*client)->Call("POST", "/v1/batches", api::ToJson(batch), 300'000);
    if (!answer.ok()) return PrintError(answer.status());
    id = JsonString(*answer, "id");
  } else {
    api::JobSpec spec = plan->spec;
    spec.code = *code_id;
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

Result<SbatchCommandLine> ParseSbatchCommandLine(const std::vector<std::string>& words) {
  SbatchCommandLine out;
  bool no_code = false, code = false;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (!out.script.empty()) {
      out.script_args.push_back(w);
      continue;
    }
    if (w == "--no-code") {
      no_code = true;
      continue;
    }
    if (w == "--code" || w.rfind("--code=", 0) == 0) {
      std::string dir = w == "--code" ? (i + 1 < words.size() ? words[++i] : "") : w.substr(7);
      if (dir.empty()) return Status::InvalidArgument("--code needs a directory");
      out.code_dir = dir;
      code = true;
      continue;
    }
    if (w.size() >= 2 && w[0] == '-') {
      out.options.push_back(w);
      // "--opt value" and "-X value": the value is the next word.
      if (api::SbatchOptionTakesNextWord(w) && i + 1 < words.size()) {
        out.options.push_back(words[++i]);
      }
      continue;
    }
    out.script = w;
  }
  if (code && no_code) return Status::InvalidArgument("--code and --no-code: give one of them");
  if (no_code) out.code_dir.clear();
  out.code_chosen = code || no_code;
  if (out.script.empty()) return Status::InvalidArgument("no batch script given");
  return out;
}

void AddSbatchCommand(CLI::App& app) {
  auto args = std::make_shared<SbatchArgs>();
  CLI::App* cmd =
      app.add_subcommand("sbatch", std::string("Run a Slurm batch script unchanged: ") + kUsage);
  cmd->footer(
      "The directory tide sbatch runs in is uploaded (up to 100 MiB; .git and what .gitignore\n"
      "names are left out) and is $SLURM_SUBMIT_DIR, where the script starts:\n"
      "  --code DIR   upload DIR instead\n"
      "  --no-code    upload only the script\n"
      "srun in the script starts its tasks on the job's nodes (docs/slurm.md).");
  cmd->add_flag("--parsable", args->parsable, "Print only the job (or array) id");
  cmd->allow_extras();
  cmd->prefix_command();
  SetAction(cmd, [args, cmd] {
    args->rest = cmd->remaining();
    return RunSbatch(*args);
  });
}

}  // namespace tide::cli
