// `tide wait ID... [--timeout 10m] [-o json]`: waits until every job has
// ended (completed, failed or cancelled).
//
// Polls GET /v1/jobs/{id}, every 200 ms at first and backing off to 1 s. A
// server that is briefly unreachable (a restart) is waited for. While
// waiting, a progress line is kept on stderr when stderr is a terminal.
// Prints each job's final status (or the job objects with -o json).
// Exit code: 0 all completed, 1 any failed or cancelled (or an error),
// 124 when --timeout passed first.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <thread>

#include "api/http_client.h"
#include "api/types.h"
#include "cli/common.h"
#include "common/duration.h"

namespace tide::cli {

namespace {

struct WaitOptions {
  std::vector<std::string> ids;
  std::string timeout;
  OutputFormat format = OutputFormat::kTable;
};

bool IsTerminalStatus(const json& job) {
  auto s = api::ParseJobStatus(JsonString(job, "status"));
  return s && api::IsTerminal(*s);
}

std::string Describe(const json& job) {
  std::string s = JsonString(job, "status");
  std::string why = JsonString(job, "reason");
  if (why.empty()) why = JsonString(job, "pending_reason");
  return why.empty() ? s : s + " (" + why + ")";
}

// "j-1: queued (waiting for 4 free RTX4090)" for one job, else counts by status.
std::string Progress(const std::vector<std::string>& ids, const std::map<std::string, json>& jobs,
                     int64_t elapsed_ms, const std::string& trouble) {
  std::string line;
  if (ids.size() == 1) {
    auto it = jobs.find(ids[0]);
    line = ids[0] + ": " + (it == jobs.end() ? "?" : Describe(it->second));
  } else {
    std::map<std::string, int> counts;
    for (const auto& id : ids) {
      auto it = jobs.find(id);
      ++counts[it == jobs.end() ? "unknown" : JsonString(it->second, "status")];
    }
    line = "waiting for " + std::to_string(ids.size()) + " jobs:";
    bool first = true;
    for (const auto& [status, n] : counts) {
      line += (first ? " " : ", ") + std::to_string(n) + " " + status;
      first = false;
    }
  }
  line += "  [" + FormatDurationSeconds(elapsed_ms / 1000) + "]";
  if (!trouble.empty()) line += "  " + trouble;
  return line;
}

int RunWait(const WaitOptions& opts) {
  int64_t timeout_ms = 0;
  if (!opts.timeout.empty()) {
    auto t = ParseDurationMs(opts.timeout);
    if (!t.ok()) {
      PrintError(t.status().WithContext("--timeout"));
      return kExitUsage;
    }
    timeout_ms = *t;
  }
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());

  const bool tty = isatty(STDERR_FILENO) == 1;
  auto start = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start)
        .count();
  };
  std::map<std::string, json> jobs;  // last state seen
  int64_t interval_ms = 200;
  bool timed_out = false;
  while (true) {
    std::string trouble;
    for (const auto& id : opts.ids) {
      auto it = jobs.find(id);
      if (it != jobs.end() && IsTerminalStatus(it->second)) continue;
      auto job = (*client)->Call("GET", "/v1/jobs/" + api::UrlEncode(id));
      if (job.ok()) {
        jobs[id] = std::move(job).value();
      } else if (job.status().code() == Code::kUnavailable) {
        trouble = "(server unreachable, retrying)";
      } else {
        if (tty) std::cerr << "\r\033[K";
        return PrintError(job.status().WithContext(id));
      }
    }
    bool done = std::all_of(opts.ids.begin(), opts.ids.end(), [&](const std::string& id) {
      auto it = jobs.find(id);
      return it != jobs.end() && IsTerminalStatus(it->second);
    });
    if (done) break;
    if (timeout_ms > 0 && elapsed_ms() >= timeout_ms) {
      timed_out = true;
      break;
    }
    if (tty) {
      std::cerr << "\r\033[K" << Progress(opts.ids, jobs, elapsed_ms(), trouble) << std::flush;
    }
    int64_t sleep_ms = interval_ms;
    if (timeout_ms > 0) sleep_ms = std::min<int64_t>(sleep_ms, timeout_ms - elapsed_ms());
    std::this_thread::sleep_for(std::chrono::milliseconds(std::max<int64_t>(sleep_ms, 1)));
    interval_ms = std::min<int64_t>(interval_ms * 3 / 2, 1000);
  }
  if (tty) std::cerr << "\r\033[K" << std::flush;

  int code = kExitOk;
  json out = json::array();
  for (const auto& id : opts.ids) {
    auto it = jobs.find(id);
    const json job = it == jobs.end() ? json{{"id", id}, {"status", "unknown"}} : it->second;
    if (JsonString(job, "status") != "completed") code = kExitError;
    if (opts.format == OutputFormat::kJson) {
      out.push_back(job);
    } else {
      std::cout << id << " " << Describe(job) << "\n";
    }
  }
  if (opts.format == OutputFormat::kJson) PrintJson(out);
  if (timed_out) {
    std::cerr << "error: timed out after " << opts.timeout << "\n";
    return kExitTimeout;
  }
  return code;
}

}  // namespace

void AddWaitCommand(CLI::App& app) {
  auto opts = std::make_shared<WaitOptions>();
  CLI::App* cmd = app.add_subcommand("wait", "Wait until jobs end; exit 0 only if all completed");
  cmd->add_option("ids", opts->ids, "Job ids")->required();
  cmd->add_option("--timeout", opts->timeout, "Give up after this long (exit 124), e.g. 10m");
  AddOutputFlag(cmd, &opts->format);
  cmd->footer("Exit codes: 0 all completed, 1 any failed or cancelled, 124 timeout.");
  SetAction(cmd, [opts] { return RunWait(*opts); });
}

}  // namespace tide::cli
