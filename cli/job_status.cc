// `tide status ID [-o json]`: one job in detail: status and why, exit code,
// attempt, node and GPUs, its GPUs' utilisation and memory now and on
// average over the run (GET /v1/jobs/{id}/telemetry) with a warning when a
// running job keeps them mostly idle, timestamps, and a table of its
// attempts. `-o json` prints the job as the server sent it.
#include <algorithm>
#include <functional>
#include <iostream>

#include "api/http_client.h"
#include "api/types.h"
#include "cli/common.h"
#include "common/duration.h"

namespace tide::cli {

namespace {

struct StatusOptions {
  std::string id;
  OutputFormat format = OutputFormat::kTable;
};

std::string IntList(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_array() || j[key].empty()) return "-";
  std::string out;
  for (const auto& v : j[key]) {
    if (!v.is_number_integer()) continue;
    if (!out.empty()) out += ",";
    out += std::to_string(v.get<int64_t>());
  }
  return out;
}

std::string ExitCode(const json& j) {
  if (!j.contains("exit_code") || !j["exit_code"].is_number_integer()) return "-";
  return std::to_string(j["exit_code"].get<int64_t>());
}

// POSIX shell quoting, so a shown command can be pasted back: 'a b' -> "'a b'".
std::string ShellQuote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789-_./=:,+@%") == std::string::npos) {
    return arg;
  }
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string Command(const json& job) {
  if (!job.contains("command")) return "-";
  const json& c = job["command"];
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) return "-";
  std::string out;
  for (const auto& arg : c) {
    if (!arg.is_string()) continue;
    if (!out.empty()) out += " ";
    out += ShellQuote(arg.get<std::string>());
  }
  return out;
}

// Utilisation and memory of the job's GPUs: the newest readings and the run
// averages, and the idle warning.
void PrintTelemetry(const api::JobTelemetry& t, bool ended,
                    const std::function<void(const std::string&, const std::string&)>& row) {
  if (t.readings == 0) return;
  double util = 0, mem = 0;
  int n = 0;
  for (const auto& g : t.gpus) {
    if (g.now.utilization_pct < 0) continue;
    util += g.now.utilization_pct;
    mem += static_cast<double>(std::max<int64_t>(g.now.memory_used_mb, 0));
    ++n;
  }
  const std::string when = ended ? " at the end" : " now";
  std::string now_util = n > 0 ? FormatPercent(util / n) + when + ", " : "";
  std::string now_mem = n > 0 ? FormatGib(mem / n) + " per GPU" + when + ", " : "per GPU: ";
  row("GPU util", now_util + FormatPercent(t.avg_utilization_pct) + " average over the run");
  row("GPU memory", now_mem + FormatGib(t.avg_memory_used_mb) + " average over the run");
  if (t.low_utilization) row("Warning", t.low_utilization_reason);
}

void PrintGpuTable(const api::JobTelemetry& t) {
  if (t.gpus.empty()) return;
  Table table({"GPU", "MODEL", "UTIL", "MEM", "TEMP", "AVG UTIL", "AVG MEM", "READINGS"});
  for (const auto& g : t.gpus) {
    table.AddRow({(g.node.empty() ? g.node_id : g.node) + ":" + std::to_string(g.index),
                  g.model.empty() ? "-" : g.model, FormatPercent(g.now.utilization_pct),
                  FormatGib(static_cast<double>(g.now.memory_used_mb)),
                  g.now.temperature_c < 0 ? "-" : std::to_string(g.now.temperature_c) + "C",
                  FormatPercent(g.avg_utilization_pct), FormatGib(g.avg_memory_used_mb),
                  std::to_string(g.readings)});
  }
  std::cout << "\nGPUs of attempt " << t.attempt << "\n" << table.ToString();
}

void PrintHuman(const json& job, const api::JobTelemetry* telemetry) {
  int64_t now = NowMs();
  auto row = [](const std::string& label, const std::string& value) {
    if (value.empty() || value == "-") return;
    std::cout << label << std::string(label.size() < 14 ? 14 - label.size() : 1, ' ') << value
              << "\n";
  };
  std::string status = JsonString(job, "status");
  auto parsed = api::ParseJobStatus(status);
  if (job.value("cancel_requested", false) && parsed && !api::IsTerminal(*parsed)) {
    std::string why = JsonString(job, "cancel_reason");
    status += " (stopping" + (why.empty() ? "" : ": " + why) + ")";
  } else if (job.value("preempt_requested", false) && parsed && !api::IsTerminal(*parsed)) {
    status += " (stopping: preempted, will resume)";
  }
  row("ID", JsonString(job, "id"));
  row("Name", JsonString(job, "name"));
  row("Status", status);
  row("Reason", JsonString(job, "reason"));
  row("Pending", JsonString(job, "pending_reason"));
  if (int64_t at = JsonInt(job, "expected_start"); at > 0 && status == "queued") {
    row("Expected start", at <= now ? "now" : "in " + FormatAge(at, now));
  }
  std::string tier = JsonString(job, "tier");
  if (tier == "spot") row("Tier", tier);
  if (int64_t p = JsonInt(job, "priority"); p != 0) row("Priority", std::to_string(p));
  row("Exit code", ExitCode(job));
  row("Attempt", std::to_string(JsonInt(job, "attempt")));
  if (int64_t retry_times = JsonInt(job, "retry_times"); retry_times > 0) {
    row("Retries", std::to_string(JsonInt(job, "retries")) + " of " + std::to_string(retry_times));
  }
  if (!JsonString(job, "batch").empty()) {
    std::string params;
    if (job.contains("params") && job["params"].is_object()) {
      for (const auto& [k, v] : job["params"].items()) {
        params += (params.empty() ? "" : " ") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
      }
    }
    row("Batch", JsonString(job, "batch") + ", trial " + JsonString(job, "trial") +
                     (params.empty() ? "" : " (" + params + ")"));
  }
  if (job.contains("checkpoint") && job["checkpoint"].is_object()) {
    const json& c = job["checkpoint"];
    row("Checkpoint", FormatBytes(JsonInt(c, "bytes")) + " from attempt " +
                          std::to_string(JsonInt(c, "attempt")) + ", saved " +
                          FormatAge(now, JsonInt(c, "at")) + " ago");
  }
  if (job.contains("depends_on") && job["depends_on"].is_array() && !job["depends_on"].empty()) {
    std::string deps;
    for (const auto& d : job["depends_on"]) {
      deps += (deps.empty() ? "" : ", ") + JsonString(d, "condition") + ":" + JsonString(d, "job");
    }
    row("Depends on", deps);
  }
  row("Node", JsonString(job, "node_id"));
  std::string gpus = IntList(job, "gpus");
  row("GPUs", FormatJobGpus(job) + (gpus == "-" ? "" : "  (assigned: " + gpus + ")"));
  if (telemetry != nullptr) PrintTelemetry(*telemetry, parsed && api::IsTerminal(*parsed), row);
  row("Image", JsonString(job, "image"));
  row("Command", Command(job));
  if (int64_t s = JsonInt(job, "max_runtime"); s > 0) row("Max runtime", FormatDurationSeconds(s));
  if (job.contains("max_cost")) row("Max cost", CreditsText(job, "max_cost") + " credits");
  if (std::string cost = CreditsText(job, "cost"); cost != "-" && cost != "0") {
    row("Cost", cost + " credits so far");
  }
  if (std::string escrow = CreditsText(job, "escrow"); escrow != "-" && escrow != "0") {
    row("Escrow", escrow + " credits held");
  }
  // A list of strings, comma-joined ("" when absent or empty).
  auto joined = [&](const char* key) {
    std::string out;
    if (!job.contains(key) || !job[key].is_array()) return out;
    for (const auto& t : job[key]) {
      if (t.is_string()) out += (out.empty() ? "" : ", ") + t.get<std::string>();
    }
    return out;
  };
  if (std::string tags = joined("tags"); !tags.empty()) row("Tags", tags);
  if (std::string names = joined("secrets"); !names.empty()) {
    row("Secrets", names + " (values never shown)");
  }
  row("Code", JsonString(job, "code"));
  row("Created", FormatTimestamp(now, JsonInt(job, "created_at")));
  row("Started", FormatTimestamp(now, JsonInt(job, "started_at")));
  row("Finished", FormatTimestamp(now, JsonInt(job, "finished_at")));
  if (int64_t at = JsonInt(job, "deleted_at"); at > 0) {
    row("Deleted", FormatTimestamp(now, at) + " (logs, outputs, checkpoints and code are gone)");
  }
  int64_t started = JsonInt(job, "started_at");
  int64_t finished = JsonInt(job, "finished_at");
  if (started > 0) {
    int64_t end = finished > started ? finished : now;
    row("Runtime", FormatAge(end, started));
  }

  if (!job.contains("attempts") || !job["attempts"].is_array() || job["attempts"].empty()) return;
  Table table({"ATTEMPT", "NODE", "GPUS", "STARTED", "RUNTIME", "EXIT", "REASON"});
  for (const auto& a : job["attempts"]) {
    int64_t a_start = JsonInt(a, "started_at");
    int64_t a_end = JsonInt(a, "finished_at");
    std::string runtime = "-";
    if (a_start > 0) runtime = FormatAge(a_end > a_start ? a_end : now, a_start);
    std::string node = JsonString(a, "node_id");
    std::string reason = JsonString(a, "reason");
    table.AddRow({std::to_string(JsonInt(a, "attempt")), node.empty() ? "-" : node,
                  IntList(a, "gpus"), a_start > 0 ? FormatAge(now, a_start) + " ago" : "-", runtime,
                  ExitCode(a), reason.empty() ? "-" : reason});
  }
  std::cout << "\nAttempts\n" << table.ToString();
  if (telemetry != nullptr) PrintGpuTable(*telemetry);

  // A multi-node attempt: where each rank runs and how it ended.
  const json& last = job["attempts"].back();
  if (!last.contains("ranks") || !last["ranks"].is_array()) return;
  Table ranks({"RANK", "NODE", "GPUS", "STATE", "EXIT", "REASON"});
  int rank = 0;
  for (const auto& r : last["ranks"]) {
    std::string state = JsonInt(r, "finished_at") > 0  ? "exited"
                        : JsonInt(r, "started_at") > 0 ? "running"
                                                       : "starting";
    std::string reason = JsonString(r, "reason");
    ranks.AddRow({std::to_string(rank++), JsonString(r, "node_id"), IntList(r, "gpus"), state,
                  ExitCode(r), reason.empty() ? "-" : reason});
  }
  std::cout << "\nRanks of attempt " << JsonInt(last, "attempt") << " (rendezvous "
            << JsonString(last, "master_addr") << ":" << JsonInt(last, "master_port") << ")\n"
            << ranks.ToString();
}

int RunStatus(const StatusOptions& opts) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto job = (*client)->Call("GET", "/v1/jobs/" + api::UrlEncode(opts.id));
  if (!job.ok()) return PrintError(job.status());
  if (opts.format == OutputFormat::kJson) {
    PrintJson(*job);
  } else {
    // Telemetry is a detail: a job shows without it if it cannot be read.
    auto telemetry = (*client)->GetJobTelemetry(opts.id, /*series=*/false);
    PrintHuman(*job, telemetry.ok() ? &*telemetry : nullptr);
  }
  return kExitOk;
}

}  // namespace

void AddStatusCommand(CLI::App& app) {
  auto opts = std::make_shared<StatusOptions>();
  CLI::App* cmd = app.add_subcommand("status", "Show a job: status, reasons, attempts");
  cmd->add_option("id", opts->id, "Job id")->required();
  AddOutputFlag(cmd, &opts->format);
  SetAction(cmd, [opts] { return RunStatus(*opts); });
}

}  // namespace tide::cli
