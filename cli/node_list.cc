// `tide nodes [-o json]`: the agents that joined, their state (ready,
// draining, lost), their GPUs with utilisation, memory and temperature at
// the last heartbeat, and how long ago each last sent one.
#include <iostream>

#include "cli/common.h"

namespace tide::cli {

namespace {

struct NodesOptions {
  OutputFormat format = OutputFormat::kTable;
};

int RunNodes(const NodesOptions& opts) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("GET", "/v1/nodes");
  if (!answer.ok()) return PrintError(answer.status());
  json nodes = answer->contains("nodes") && (*answer)["nodes"].is_array() ? (*answer)["nodes"]
                                                                          : json::array();
  if (opts.format == OutputFormat::kJson) {
    PrintJson(nodes);
    return kExitOk;
  }
  if (nodes.empty()) {
    std::cout << "No nodes. Start one with `tide agent --server URL --join-token TOKEN`.\n";
    return kExitOk;
  }
  int64_t now = NowMs();
  Table table({"NAME", "ID", "STATE", "GPUS", "UTIL", "MEM", "TEMP", "LAST HEARTBEAT"});
  for (const auto& n : nodes) {
    int64_t beat = JsonInt(n, "last_heartbeat");
    table.AddRow({JsonString(n, "name"), JsonString(n, "id"), NodeStateText(n), FormatNodeGpus(n),
                  NodeGpuUtilization(n), NodeGpuMemory(n), NodeGpuTemperature(n),
                  beat > 0 ? FormatAge(now, beat) + " ago" : "-"});
  }
  std::cout << table.ToString();
  return kExitOk;
}

}  // namespace

void AddNodesCommand(CLI::App& app) {
  auto opts = std::make_shared<NodesOptions>();
  CLI::App* cmd = app.add_subcommand("nodes", "List GPU nodes (agents) and their GPUs");
  AddOutputFlag(cmd, &opts->format);
  SetAction(cmd, [opts] { return RunNodes(*opts); });
}

}  // namespace tide::cli
