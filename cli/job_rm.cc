// `tide rm ID... [-o json]`: deletes ended jobs' logs, metric lines,
// outputs, checkpoints and code archive for good. What billing needs stays
// (`tide status` shows the job as deleted, its cost and attempts). A job
// that has not ended is refused: cancel it first. Deleting a job again is
// not an error. Exit code 1 if any id failed.
#include <iostream>

#include "api/http_client.h"
#include "cli/common.h"

namespace tide::cli {

namespace {

struct RmOptions {
  std::vector<std::string> ids;
  OutputFormat format = OutputFormat::kTable;
};

int RunRm(const RmOptions& opts) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  int code = kExitOk;
  json out = json::array();
  for (const auto& id : opts.ids) {
    auto job = (*client)->Call("DELETE", "/v1/jobs/" + api::UrlEncode(id));
    if (!job.ok()) {
      code = PrintError(job.status().WithContext(id));
      continue;
    }
    if (opts.format == OutputFormat::kJson) {
      out.push_back(*job);
      continue;
    }
    std::cout << id << " deleted (" << JsonString(*job, "status") << ")\n";
  }
  if (opts.format == OutputFormat::kJson) PrintJson(out);
  return code;
}

}  // namespace

void AddRmCommand(CLI::App& app) {
  auto opts = std::make_shared<RmOptions>();
  CLI::App* cmd = app.add_subcommand(
      "rm", "Delete ended jobs' logs, outputs, checkpoints and code for good (billing stays)");
  cmd->add_option("ids", opts->ids, "Job ids")->required();
  AddOutputFlag(cmd, &opts->format);
  SetAction(cmd, [opts] { return RunRm(*opts); });
}

}  // namespace tide::cli
