// `tide metrics ID [--attempt N] [--rank R] [--last] [-o json|table|csv]`:
// what a job wrote to $TIDE_METRICS_FILE, one JSON object per line, as a
// table with one column per metric (step first), every attempt in order.
// --last prints only the newest value of each metric.
#include <algorithm>
#include <iostream>
#include <set>

#include "api/http_client.h"
#include "cli/common.h"

namespace tide::cli {

namespace {

struct MetricsOptions {
  std::string id;
  int attempt = 0;
  int rank = 0;
  bool last = false;
  OutputFormat format = OutputFormat::kTable;
};

int RunMetrics(const MetricsOptions& opts) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  std::string target = "/v1/jobs/" + api::UrlEncode(opts.id) + "/metrics?rank=" +
                       std::to_string(opts.rank);
  if (opts.attempt > 0) target += "&attempt=" + std::to_string(opts.attempt);
  if (opts.last) target += "&last=true";
  auto answer = (*client)->Call("GET", target);
  if (!answer.ok()) return PrintError(answer.status());
  if (opts.format == OutputFormat::kJson) {
    PrintJson(opts.last ? (*answer)["last"] : (*answer)["metrics"]);
    return kExitOk;
  }
  if (opts.last) {
    Table t({"METRIC", "LAST"});
    for (auto& [k, v] : (*answer)["last"].items()) t.AddRow({k, JsonText(v)});
    std::cout << t.ToString();
    return kExitOk;
  }
  const json& points = (*answer)["metrics"];
  // Columns: attempt, step, then every other metric in name order.
  std::set<std::string> names;
  for (const auto& p : points) {
    for (auto& [k, v] : p.items()) {
      if (k != "attempt" && k != "step") names.insert(k);
    }
  }
  std::vector<std::string> columns = {"attempt", "step"};
  columns.insert(columns.end(), names.begin(), names.end());
  if (opts.format == OutputFormat::kCsv) {
    std::string line;
    for (size_t i = 0; i < columns.size(); ++i) line += (i ? "," : "") + CsvField(columns[i]);
    std::cout << line << "\n";
    for (const auto& p : points) {
      line.clear();
      for (size_t i = 0; i < columns.size(); ++i) {
        line += (i ? "," : "") + CsvField(p.contains(columns[i]) ? JsonText(p[columns[i]]) : "");
      }
      std::cout << line << "\n";
    }
    return kExitOk;
  }
  Table t(columns);
  for (const auto& p : points) {
    std::vector<std::string> row;
    for (const auto& c : columns) row.push_back(p.contains(c) ? JsonText(p[c]) : "-");
    t.AddRow(std::move(row));
  }
  std::cout << t.ToString();
  if (points.empty()) std::cerr << "no metrics yet: the job appends JSON lines to $TIDE_METRICS_FILE\n";
  int skipped = answer->value("skipped", 0);
  if (skipped > 0) std::cerr << skipped << " lines were not JSON objects and are not shown\n";
  return kExitOk;
}

}  // namespace

void AddMetricsCommand(CLI::App& app) {
  auto opts = std::make_shared<MetricsOptions>();
  CLI::App* cmd = app.add_subcommand("metrics", "Print the metrics a job reported");
  cmd->add_option("id", opts->id, "Job id")->required();
  cmd->add_option("--attempt", opts->attempt, "Only this attempt (default: all)")
      ->check(CLI::Range(1, 1'000'000));
  cmd->add_option("--rank", opts->rank, "Node of a multi-node job (default 0)")
      ->check(CLI::Range(0, 63));
  cmd->add_flag("--last", opts->last, "Only the newest value of each metric");
  AddOutputFlag(cmd, &opts->format, /*csv=*/true);
  SetAction(cmd, [opts] { return RunMetrics(*opts); });
}

}  // namespace tide::cli
