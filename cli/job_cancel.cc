// `tide cancel ID... [-o json]`: asks the server to cancel jobs and prints
// each one's new status. A queued job is cancelled at once; a running one is
// given notice (SIGTERM and its grace period) first, so it shows as
// "running, cancelling" until the agent reports back. Cancelling a job that
// already ended is not an error. Exit code 1 if any id failed.
#include <iostream>

#include "api/http_client.h"
#include "api/types.h"
#include "cli/common.h"

namespace tide::cli {

namespace {

struct CancelOptions {
  std::vector<std::string> ids;
  OutputFormat format = OutputFormat::kTable;
};

int RunCancel(const CancelOptions& opts) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  int code = kExitOk;
  json out = json::array();
  for (const auto& id : opts.ids) {
    auto job =
        (*client)->Call("POST", "/v1/jobs/" + api::UrlEncode(id) + "/cancel", json::object());
    if (!job.ok()) {
      code = PrintError(job.status().WithContext(id));
      continue;
    }
    if (opts.format == OutputFormat::kJson) {
      out.push_back(*job);
      continue;
    }
    std::string status = JsonString(*job, "status");
    auto parsed = api::ParseJobStatus(status);
    if (parsed && !api::IsTerminal(*parsed)) status += ", cancelling";
    std::cout << id << " " << status << "\n";
  }
  if (opts.format == OutputFormat::kJson) PrintJson(out);
  return code;
}

}  // namespace

void AddCancelCommand(CLI::App& app) {
  auto opts = std::make_shared<CancelOptions>();
  CLI::App* cmd = app.add_subcommand("cancel", "Cancel jobs");
  cmd->add_option("ids", opts->ids, "Job ids")->required();
  AddOutputFlag(cmd, &opts->format);
  SetAction(cmd, [opts] { return RunCancel(*opts); });
}

}  // namespace tide::cli
