// `tide queue [-o json]`: pending and running GPUs by requested GPU type
// with the expected wait, then your queued jobs with why each waits and
// when it is expected to start.
#include <iostream>

#include "cli/common.h"
#include "common/duration.h"

namespace tide::cli {

namespace {

struct QueueOptions {
  OutputFormat format = OutputFormat::kTable;
};

std::string Wait(const json& seconds) {
  if (!seconds.is_number_integer()) return "-";
  int64_t s = seconds.get<int64_t>();
  return s <= 0 ? "none" : FormatDurationSeconds(s);
}

int RunQueue(const QueueOptions& opts) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto q = (*client)->Call("GET", "/v1/queue");
  if (!q.ok()) return PrintError(q.status());
  if (opts.format == OutputFormat::kJson) {
    PrintJson(*q);
    return kExitOk;
  }
  std::cout << JsonInt(*q, "free_gpus") << " of " << JsonInt(*q, "total_gpus")
            << " GPUs free\n\n";
  Table groups({"GPU TYPE", "PENDING JOBS", "PENDING GPUS", "RUNNING JOBS", "RUNNING GPUS",
                "EXPECTED WAIT"});
  for (const auto& g : (*q)["by_gpu_type"]) {
    groups.AddRow({JsonString(g, "gpu_type"), std::to_string(JsonInt(g, "pending_jobs")),
                   std::to_string(JsonInt(g, "pending_gpus")),
                   std::to_string(JsonInt(g, "running_jobs")),
                   std::to_string(JsonInt(g, "running_gpus")), Wait(g["expected_wait_s"])});
  }
  std::cout << groups.ToString();
  const json& jobs = (*q)["jobs"];
  if (jobs.empty()) {
    std::cout << "\nNo queued jobs of yours.\n";
    return kExitOk;
  }
  int64_t now = NowMs();
  Table table({"ID", "NAME", "GPUS", "EXPECTED START", "WHY WAITING"});
  for (const auto& j : jobs) {
    std::string start = "-";
    if (j["expected_start"].is_number_integer()) {
      int64_t at = j["expected_start"].get<int64_t>();
      start = at <= now ? "now" : "in " + FormatAge(at, now);
    }
    table.AddRow({JsonString(j, "id"), JsonString(j, "name"),
                  std::to_string(JsonInt(j, "gpus")) + " " + JsonString(j, "gpu_type"), start,
                  JsonString(j, "pending_reason")});
  }
  std::cout << "\n" << table.ToString();
  return kExitOk;
}

}  // namespace

void AddQueueCommand(CLI::App& app) {
  auto opts = std::make_shared<QueueOptions>();
  CLI::App* cmd = app.add_subcommand("queue", "Pending and running work by GPU type, expected waits");
  AddOutputFlag(cmd, &opts->format);
  SetAction(cmd, [opts] { return RunQueue(*opts); });
}

}  // namespace tide::cli
