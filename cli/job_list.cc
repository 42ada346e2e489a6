// `tide ls [--status S] [--tag T] [--limit N] [--all] [-o json]`: lists jobs,
// newest first as the server orders them.
//
// Table: ID NAME STATUS GPUS NODE AGE REASON (the reason, or while queued the
// pending reason). -o json prints a JSON array of the server's job objects.
// --all follows the pages (GET /v1/jobs?after=NEXT) to the end.
#include <iostream>
#include <set>

#include "api/http_client.h"
#include "api/types.h"
#include "cli/common.h"

namespace tide::cli {

namespace {

struct ListOptions {
  std::string status;
  std::string tag;
  int limit = 0;
  bool all = false;
  OutputFormat format = OutputFormat::kTable;
};

std::string ListTarget(const ListOptions& opts, const std::string& after) {
  std::string q;
  auto add = [&](const std::string& k, const std::string& v) {
    if (v.empty()) return;
    q += (q.empty() ? "?" : "&") + k + "=" + api::UrlEncode(v);
  };
  add("status", opts.status);
  add("tag", opts.tag);
  if (opts.limit > 0) add("limit", std::to_string(opts.limit));
  add("after", after);
  return "/v1/jobs" + q;
}

// "running", or "running, cancelling" while a cancel is on its way.
std::string ShownStatus(const json& job) {
  std::string status = JsonString(job, "status");
  auto parsed = api::ParseJobStatus(status);
  bool cancelling = job.value("cancel_requested", false) && parsed && !api::IsTerminal(*parsed);
  return cancelling ? status + ", cancelling" : status;
}

int RunList(const ListOptions& opts) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  json jobs = json::array();
  std::set<std::string> seen_pages;
  std::string after;
  while (true) {
    auto page = (*client)->Call("GET", ListTarget(opts, after));
    if (!page.ok()) return PrintError(page.status());
    if (page->contains("jobs") && (*page)["jobs"].is_array()) {
      for (auto& job : (*page)["jobs"]) jobs.push_back(std::move(job));
    }
    after = JsonString(*page, "next");
    // A server that hands out the same page token twice would loop forever.
    if (!opts.all || after.empty() || !seen_pages.insert(after).second) break;
  }

  if (opts.format == OutputFormat::kJson) {
    PrintJson(jobs);
    return kExitOk;
  }
  if (jobs.empty()) {
    std::cout << "No jobs.\n";
    return kExitOk;
  }
  int64_t now = NowMs();
  Table table({"ID", "NAME", "STATUS", "GPUS", "NODE", "AGE", "REASON"});
  for (const auto& job : jobs) {
    std::string reason = JsonString(job, "reason");
    if (reason.empty()) reason = JsonString(job, "pending_reason");
    std::string node = JsonString(job, "node_id");
    table.AddRow({JsonString(job, "id"), JsonString(job, "name"), ShownStatus(job),
                  FormatJobGpus(job), node.empty() ? "-" : node,
                  FormatAge(now, JsonInt(job, "created_at")), reason});
  }
  std::cout << table.ToString();
  if (!opts.all && !after.empty()) {
    std::cerr << "(more jobs: use --all to list them all)\n";
  }
  return kExitOk;
}

}  // namespace

void AddListCommand(CLI::App& app) {
  auto opts = std::make_shared<ListOptions>();
  CLI::App* cmd = app.add_subcommand("ls", "List jobs");
  cmd->add_option("--status", opts->status, "Only jobs with this status")
      ->check(CLI::IsMember({"queued", "starting", "running", "completed", "failed", "cancelled"}));
  cmd->add_option("--tag", opts->tag, "Only jobs with this tag");
  cmd->add_option("--limit", opts->limit, "Jobs per page (default: the server's)")
      ->check(CLI::Range(1, 100000));
  cmd->add_flag("-a,--all", opts->all, "Follow the pages to the end");
  AddOutputFlag(cmd, &opts->format);
  SetAction(cmd, [opts] { return RunList(*opts); });
}

}  // namespace tide::cli
