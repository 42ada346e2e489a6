// `tide top [--once] [--interval 2s] [--limit N]`: a live view of the
// running jobs (their GPUs' utilisation and memory now and over the run,
// cost, the low-utilisation flag) and of the nodes (state, free GPUs,
// utilisation, memory, temperature), redrawn every interval until Ctrl-C.
// `--once` prints one frame and exits (for scripts and tests); when stdout
// is not a terminal, frames follow one another instead of redrawing.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <sstream>
#include <thread>

#include "api/http_client.h"
#include "cli/common.h"
#include "common/clock.h"

namespace tide::cli {

namespace {

struct TopOptions {
  bool once = false;
  int64_t interval_ms = 2'000;
  int limit = 20;
};

// One frame, or the error that stopped it.
Result<std::string> Frame(api::Client& client, const TopOptions& opts) {
  auto running = client.Call("GET", "/v1/jobs?status=running&limit=" + std::to_string(opts.limit));
  if (!running.ok()) return running.status();
  auto starting = client.Call("GET", "/v1/jobs?status=starting&limit=" + std::to_string(opts.limit));
  if (!starting.ok()) return starting.status();
  auto nodes = client.Call("GET", "/v1/nodes");
  if (!nodes.ok()) return nodes.status();

  const int64_t now = NowMs();
  std::ostringstream out;
  out << "tide top   " << FormatTime(now) << "   " << client.server() << "\n\n";

  json jobs = json::array();
  for (const json* page : {&*running, &*starting}) {
    if (!page->contains("jobs") || !(*page)["jobs"].is_array()) continue;
    for (const auto& j : (*page)["jobs"]) jobs.push_back(j);
  }
  Table table({"JOB", "NAME", "STATUS", "NODE", "GPUS", "UTIL", "AVG UTIL", "MEM", "RUNTIME",
               "COST", "NOTE"});
  std::vector<std::string> warnings;
  for (const auto& j : jobs) {
    if (static_cast<int>(table.size()) >= opts.limit) break;
    std::string id = JsonString(j, "id");
    std::string util = "-", avg = "-", mem = "-", note;
    if (JsonString(j, "status") == "running") {
      auto t = client.GetJobTelemetry(id, /*series=*/false);
      if (t.ok() && t->readings > 0) {
        double u = 0, m = 0;
        int n = 0;
        for (const auto& g : t->gpus) {
          if (g.now.utilization_pct < 0) continue;
          u += g.now.utilization_pct;
          m += static_cast<double>(std::max<int64_t>(g.now.memory_used_mb, 0));
          ++n;
        }
        if (n > 0) {
          util = FormatPercent(u / n);
          mem = FormatGib(m);
        }
        avg = FormatPercent(t->avg_utilization_pct);
        if (t->low_utilization) {
          note = "low GPU utilisation";
          warnings.push_back(id + ": " + t->low_utilization_reason);
        }
      }
    }
    int64_t started = JsonInt(j, "started_at");
    std::string gpus;
    if (j.contains("gpus") && j["gpus"].is_array()) {
      for (const auto& g : j["gpus"]) {
        if (g.is_number_integer()) gpus += (gpus.empty() ? "" : ",") + std::to_string(g.get<int>());
      }
    }
    std::string node = JsonString(j, "node_id");
    std::string name = JsonString(j, "name");
    table.AddRow({id, name.empty() ? "-" : name, JsonString(j, "status"), node.empty() ? "-" : node,
                  gpus.empty() ? "-" : gpus, util, avg, mem,
                  started > 0 ? FormatAge(now, started) : "-", CreditsText(j, "cost"),
                  note.empty() ? "-" : note});
  }
  out << "JOBS (" << table.size() << " running or starting)\n";
  if (table.size() == 0) {
    out << "  none\n";
  } else {
    out << table.ToString();
  }
  for (const auto& w : warnings) out << "  ! " << w << "\n";

  Table node_table({"NODE", "STATE", "GPUS", "FREE", "UTIL", "MEM", "TEMP", "HEARTBEAT"});
  if (nodes->contains("nodes") && (*nodes)["nodes"].is_array()) {
    for (const auto& n : (*nodes)["nodes"]) {
      int64_t beat = JsonInt(n, "last_heartbeat");
      node_table.AddRow({JsonString(n, "name"), NodeStateText(n), FormatNodeGpus(n),
                         std::to_string(JsonInt(n, "free_gpus")), NodeGpuUtilization(n),
                         NodeGpuMemory(n), NodeGpuTemperature(n),
                         beat > 0 ? FormatAge(now, beat) + " ago" : "-"});
    }
  }
  out << "\nNODES (" << node_table.size() << ")\n";
  if (node_table.size() == 0) {
    out << "  none\n";
  } else {
    out << node_table.ToString();
  }
  return out.str();
}

int RunTop(const TopOptions& opts) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  for (;;) {
    auto frame = Frame(**client, opts);
    if (!frame.ok()) return PrintError(frame.status());
    if (tty && !opts.once) std::cout << "\033[H\033[2J";  // home, clear
    std::cout << *frame;
    if (opts.once) return kExitOk;
    if (!tty) std::cout << "\n";
    std::cout.flush();
    std::this_thread::sleep_for(std::chrono::milliseconds(opts.interval_ms));
  }
}

}  // namespace

void AddTopCommand(CLI::App& app) {
  auto opts = std::make_shared<TopOptions>();
  CLI::App* cmd = app.add_subcommand(
      "top", "Live view of running jobs and nodes: GPU utilisation, memory, cost");
  cmd->add_flag("--once", opts->once, "Print one frame and exit");
  cmd->add_option_function<std::string>(
      "--interval",
      [opts](const std::string& text) {
        auto ms = ParseDurationMs(text);
        if (!ms.ok()) throw CLI::ValidationError("--interval", ms.status().message());
        if (*ms < 200) throw CLI::ValidationError("--interval", "must be at least 200ms");
        opts->interval_ms = *ms;
      },
      "Time between frames, e.g. 2s (default 2s)");
  cmd->add_option("--limit", opts->limit, "Jobs shown at most")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  SetAction(cmd, [opts] { return RunTop(*opts); });
}

}  // namespace tide::cli
