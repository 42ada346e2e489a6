// `tide batch ...`: sweeps of many trials of one job template.
//
//   tide batch submit FILE [--template SPEC] [job flags] [--code DIR] [-o json]
//                     [-- COMMAND ARGS...]
//                                        a JSON or YAML batch file (docs/batches.md);
//                                        the template may come from --template, the
//                                        job flags of `tide submit` and the command
//                                        after "--" instead of the file; checked here
//                                        first, so a bad file is refused with its line
//                                        and nothing is sent
//   tide batch status ID [--once]        counts by status and a progress bar, kept
//                                        live on a terminal until every trial ended
//   tide batch ls                        your batches, newest first
//   tide batch cancel ID                 cancels every trial that has not ended
//   tide batch results ID [-o json|csv]  each trial's id, parameters, status,
//                                        attempts, cost and last metrics
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <optional>
#include <set>
#include <thread>

#include "cli/batch.h"

#include "api/batch.h"
#include "api/http_client.h"
#include "api/spec_file.h"
#include "cli/code.h"
#include "cli/common.h"
#include "common/paths.h"

namespace tide::cli {

Status MergeBatchTemplate(const json* template_file, const SubmitFlags& flags, json* batch) {
  const bool in_file = batch->contains("template") && !(*batch)["template"].is_null();
  if (in_file && !(*batch)["template"].is_object()) {
    return Status::InvalidArgument("must be a job spec (a mapping)", "template");
  }
  if (in_file && template_file != nullptr) {
    return Status::InvalidArgument(
        "the file has a template and --template names another: give one of them", "template");
  }
  json tmpl = in_file ? (*batch)["template"] : json::object();
  if (template_file != nullptr) {
    if (!template_file->is_object()) {
      return Status::InvalidArgument("--template: a job spec must be a mapping of fields", "template");
    }
    tmpl = *template_file;
  }
  std::vector<std::string> set;
  Status st = MergeSubmitFlags(flags, &tmpl, &set);
  if (!st.ok()) {
    return Status::InvalidArgument(st.message(), "template" + (st.field().empty() ? "" : "." + st.field()));
  }
  if (!in_file && template_file == nullptr && !tmpl.contains("command")) {
    return Status::InvalidArgument(
        "is required: the job spec of every trial. Give it in the file, with --template "
        "SPEC, or as the command after \"--\": tide batch submit FILE -- python3 train.py "
        "--lr {learning_rate}",
        "template");
  }
  if (in_file || template_file != nullptr || !set.empty()) (*batch)["template"] = std::move(tmpl);
  return Status::Ok();
}

std::vector<std::string> BatchResultsHeader(const std::set<std::string>& params,
                                            const std::set<std::string>& metrics) {
  const std::set<std::string> fixed = {"trial", "status", "attempts", "cost"};
  std::vector<std::string> header = {"trial"};
  for (const auto& p : params) header.push_back(metrics.count(p) || fixed.count(p) ? "param." + p : p);
  for (const char* c : {"status", "attempts", "cost"}) header.push_back(c);
  for (const auto& m : metrics) header.push_back(params.count(m) || fixed.count(m) ? "metric." + m : m);
  return header;
}

namespace {

constexpr int kBatchTimeoutMs = 300'000;  // a 10,000-trial batch is one transaction

struct SubmitArgs {
  std::string file, key, code_dir, template_file;
  SubmitFlags flags;
  OutputFormat format = OutputFormat::kTable;
};

int RunSubmit(SubmitArgs& args) {
  const std::string& file = args.file;
  const std::string& key = args.key;
  const std::string& code_dir = args.code_dir;
  const OutputFormat format = args.format;
  args.flags.command = TrailingArgs();
  auto text = ReadFile(file);
  if (!text.ok()) return PrintError(text.status());
  auto doc = api::ParseYamlDocument(*text, file);
  if (!doc.ok()) return PrintError(doc.status());
  if (!doc->value.is_object()) {
    return PrintError(Status::InvalidArgument(file + ": a batch file must be a mapping of fields"));
  }
  std::optional<json> template_json;
  if (!args.template_file.empty()) {
    auto t = api::LoadSpecFile(args.template_file);
    if (!t.ok()) return PrintError(t.status());
    template_json = std::move(t).value();
  }
  Status merged = MergeBatchTemplate(template_json ? &*template_json : nullptr, args.flags, &doc->value);
  if (!merged.ok()) return PrintError(api::AtLine(*doc, file, merged));
  auto spec = api::BatchSpecFromJson(doc->value);
  if (!spec.ok()) return PrintError(api::AtLine(*doc, file, spec.status()));
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  if (!code_dir.empty()) {
    // Every trial runs with the same code.
    auto packed = PackCode(code_dir);
    if (!packed.ok()) return PrintError(packed.status().WithContext("pack " + code_dir));
    auto id = (*client)->UploadCode(packed->archive);
    if (!id.ok()) return PrintError(id.status().WithContext("upload " + code_dir));
    doc->value["template"]["code"] = *id;
  }
  std::string target = "/v1/batches";
  auto answer = key.empty()
                    ? (*client)->Call("POST", target, doc->value, kBatchTimeoutMs)
                    : (*client)->CallWithHeaders("POST", target, doc->value,
                                                 {{"Idempotency-Key", key}}, kBatchTimeoutMs);
  if (!answer.ok()) return PrintError(answer.status());
  if (format == OutputFormat::kJson) {
    PrintJson(*answer);
    return kExitOk;
  }
  std::cerr << "Submitted batch " << JsonString(*answer, "id") << ": " << answer->value("trials", 0)
            << " trials" << (spec->max_concurrent > 0
                                 ? ", at most " + std::to_string(spec->max_concurrent) + " at once"
                                 : std::string())
            << "; follow it with: tide batch status " << JsonString(*answer, "id") << "\n";
  std::cout << JsonString(*answer, "id") << "\n";
  return kExitOk;
}

int Count(const json& b, const char* status) {
  if (!b.contains("counts") || !b["counts"].contains(status)) return 0;
  return b["counts"][status].get<int>();
}

std::string Summary(const json& b) {
  const int total = b.value("trials", 0);
  const int done = Count(b, "completed") + Count(b, "failed") + Count(b, "cancelled");
  constexpr int kWidth = 30;
  int filled = total > 0 ? done * kWidth / total : 0;
  std::string bar = "[" + std::string(filled, '#') + std::string(kWidth - filled, '-') + "]";
  std::string out = bar + " " + std::to_string(done) + "/" + std::to_string(total) + " ended";
  for (const char* s : {"running", "starting", "queued", "completed", "failed", "cancelled"}) {
    if (Count(b, s) > 0) out += " · " + std::to_string(Count(b, s)) + " " + s;
  }
  out += " · cost " + CreditsText(b, "cost");
  return out;
}

void PrintBatch(const json& b) {
  std::cout << "Batch " << JsonString(b, "id");
  if (!JsonString(b, "experiment_batch").empty()) std::cout << " (" << JsonString(b, "experiment_batch") << ")";
  std::cout << ": " << JsonString(b, "status") << "\n";
  std::cout << "  trials          " << b.value("trials", 0) << "\n";
  std::cout << "  max_concurrent  "
            << (b.value("max_concurrent", 0) > 0 ? std::to_string(b.value("max_concurrent", 0)) : "none")
            << "\n";
  std::cout << "  retry_times     " << b.value("retry_times", 0) << "\n";
  std::cout << "  budget          " << (b["budget"].is_null() ? "none" : CreditsText(b, "budget"))
            << "\n";
  std::cout << "  cost            " << CreditsText(b, "cost") << " (escrow " << CreditsText(b, "escrow")
            << ")\n";
  std::cout << "  " << Summary(b) << "\n";
}

int RunStatus(const std::string& id, bool once, OutputFormat format) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  const std::string target = "/v1/batches/" + api::UrlEncode(id);
  auto b = (*client)->Call("GET", target);
  if (!b.ok()) return PrintError(b.status());
  if (format == OutputFormat::kJson) {
    PrintJson(*b);
    return kExitOk;
  }
  const bool live = !once && isatty(STDOUT_FILENO) == 1;
  if (!live) {
    PrintBatch(*b);
    return kExitOk;
  }
  for (;;) {
    std::cout << "\r\033[K" << Summary(*b) << std::flush;
    const std::string status = JsonString(*b, "status");
    if (status != "queued" && status != "running") break;
    std::this_thread::sleep_for(std::chrono::seconds(1));
    auto next = (*client)->Call("GET", target);
    if (next.ok()) b = std::move(next);
  }
  std::cout << "\n";
  PrintBatch(*b);
  return kExitOk;
}

int RunList(OutputFormat format) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("GET", "/v1/batches");
  if (!answer.ok()) return PrintError(answer.status());
  if (format == OutputFormat::kJson) {
    PrintJson((*answer)["batches"]);
    return kExitOk;
  }
  Table t({"ID", "NAME", "STATUS", "TRIALS", "RUNNING", "COMPLETED", "FAILED", "COST", "AGE"});
  int64_t now = NowMs();
  for (const auto& b : (*answer)["batches"]) {
    t.AddRow({JsonString(b, "id"), JsonString(b, "experiment_batch"), JsonString(b, "status"),
              std::to_string(b.value("trials", 0)), std::to_string(Count(b, "running")),
              std::to_string(Count(b, "completed")), std::to_string(Count(b, "failed")),
              CreditsText(b, "cost"), FormatAge(now, b.value("created_at", int64_t{0}))});
  }
  std::cout << t.ToString();
  return kExitOk;
}

int RunCancel(const std::string& id, OutputFormat format) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto b = (*client)->Call("POST", "/v1/batches/" + api::UrlEncode(id) + "/cancel", json::object());
  if (!b.ok()) return PrintError(b.status());
  if (format == OutputFormat::kJson) {
    PrintJson(*b);
    return kExitOk;
  }
  std::cout << id << " cancelling: " << Summary(*b) << "\n";
  return kExitOk;
}

int RunResults(const std::string& id, OutputFormat format) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("GET", "/v1/batches/" + api::UrlEncode(id) + "/results",
                                std::nullopt, kBatchTimeoutMs);
  if (!answer.ok()) return PrintError(answer.status());
  const json& results = (*answer)["results"];
  if (format == OutputFormat::kJson) {
    PrintJson(results);
    return kExitOk;
  }
  std::set<std::string> params, metrics;
  for (const auto& r : results) {
    for (auto& [k, v] : r["params"].items()) params.insert(k);
    for (auto& [k, v] : r["metrics"].items()) metrics.insert(k);
  }
  std::vector<std::string> header = BatchResultsHeader(params, metrics);
  auto row = [&](const json& r) {
    std::vector<std::string> cells = {JsonString(r, "id")};
    for (const auto& p : params) cells.push_back(r["params"].contains(p) ? JsonText(r["params"][p]) : "");
    std::string status = JsonString(r, "status");
    if (!JsonString(r, "reason").empty() && status != "completed") status += " (" + JsonString(r, "reason") + ")";
    cells.push_back(status);
    cells.push_back(std::to_string(r.value("attempts", 0)));
    cells.push_back(CreditsText(r, "cost"));
    for (const auto& m : metrics) cells.push_back(r["metrics"].contains(m) ? JsonText(r["metrics"][m]) : "");
    return cells;
  };
  if (format == OutputFormat::kCsv) {
    auto line = [](const std::vector<std::string>& cells) {
      std::string out;
      for (size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + CsvField(cells[i]);
      return out;
    };
    std::cout << line(header) << "\n";
    for (const auto& r : results) std::cout << line(row(r)) << "\n";
    return kExitOk;
  }
  std::vector<std::string> upper;
  for (auto h : header) {
    for (auto& c : h) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    upper.push_back(h);
  }
  Table t(upper);
  for (const auto& r : results) t.AddRow(row(r));
  std::cout << t.ToString();
  return kExitOk;
}

}  // namespace

void AddBatchCommands(CLI::App& app) {
  CLI::App* batch = app.add_subcommand("batch", "Sweeps: many trials of one job template");
  batch->require_subcommand(1);

  auto submit_args = std::make_shared<SubmitArgs>();
  CLI::App* submit = batch->add_subcommand("submit", "Submit a batch file (JSON or YAML)");
  submit->footer(
      "The template of every trial comes from the file, or from --template, the job flags\n"
      "and the command after \"--\" (flags override the template; {name} is a parameter):\n"
      "  tide batch submit seed.json --gpus 1 -- python3 train.py --lr {learning_rate}\n"
      "  tide batch submit seed.json --template spec.yaml --code .");
  submit->add_option("file", submit_args->file, "Batch file")->required();
  submit->add_option("--template", submit_args->template_file,
                     "Job spec (YAML or JSON) of every trial, for a file without a template")
      ->check(CLI::ExistingFile);
  AddJobFlags(submit, std::shared_ptr<SubmitFlags>(submit_args, &submit_args->flags));
  submit->add_option("--idempotency-key", submit_args->key,
                     "Submitting again with the same key returns the first batch");
  submit->add_option("--code", submit_args->code_dir,
                     "Directory to pack and upload as every trial's code");
  AddOutputFlag(submit, &submit_args->format);
  SetAction(submit, [submit_args] { return RunSubmit(*submit_args); });

  struct IdArgs {
    std::string id;
    bool once = false;
    OutputFormat format = OutputFormat::kTable;
  };
  auto status_args = std::make_shared<IdArgs>();
  CLI::App* status = batch->add_subcommand("status", "Show a batch's progress");
  status->add_option("id", status_args->id, "Batch id")->required();
  status->add_flag("--once", status_args->once, "Print once instead of following on a terminal");
  AddOutputFlag(status, &status_args->format);
  SetAction(status, [status_args] {
    return RunStatus(status_args->id, status_args->once, status_args->format);
  });

  auto list_format = std::make_shared<OutputFormat>(OutputFormat::kTable);
  CLI::App* ls = batch->add_subcommand("ls", "List your batches");
  AddOutputFlag(ls, list_format.get());
  SetAction(ls, [list_format] { return RunList(*list_format); });

  auto cancel_args = std::make_shared<IdArgs>();
  CLI::App* cancel = batch->add_subcommand("cancel", "Cancel every trial that has not ended");
  cancel->add_option("id", cancel_args->id, "Batch id")->required();
  AddOutputFlag(cancel, &cancel_args->format);
  SetAction(cancel, [cancel_args] { return RunCancel(cancel_args->id, cancel_args->format); });

  auto results_args = std::make_shared<IdArgs>();
  CLI::App* results = batch->add_subcommand("results", "Each trial's parameters, status, cost and last metrics");
  results->add_option("id", results_args->id, "Batch id")->required();
  AddOutputFlag(results, &results_args->format, /*csv=*/true);
  SetAction(results, [results_args] { return RunResults(results_args->id, results_args->format); });
}

}  // namespace tide::cli
