// `tide status ID [-o json]`: one job in detail: status and why, exit code,
// attempt, node and GPUs, timestamps, and a table of its attempts.
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

void PrintHuman(const json& job) {
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
  if (job.contains("tags") && job["tags"].is_array() && !job["tags"].empty()) {
    std::string tags;
    for (const auto& t : job["tags"]) {
      if (t.is_string()) tags += (tags.empty() ? "" : ", ") + t.get<std::string>();
    }
    row("Tags", tags);
  }
  row("Code", JsonString(job, "code"));
  row("Created", FormatTimestamp(now, JsonInt(job, "created_at")));
  row("Started", FormatTimestamp(now, JsonInt(job, "started_at")));
  row("Finished", FormatTimestamp(now, JsonInt(job, "finished_at")));
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
    PrintHuman(*job);
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
