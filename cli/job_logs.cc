// `tide logs ID [-f] [--attempt N] [--rank R]`: prints a job's output (stdout
// and stderr as the agent captured them): every attempt in turn, each after
// a marker line "--- attempt N (node, how it ended) ---" when there were
// several, or only attempt N; --rank picks one node of a multi-node job
// (default rank 0). The server keeps every attempt's log, so an attempt
// whose node is gone can still be read.
//
// -f follows the current attempt as it is written and returns when the job
// ends. A dropped stream is resumed from the last byte received; when the
// job is requeued (attempt+1) the new attempt's log follows a marker line on
// stderr.
#include <chrono>
#include <iostream>
#include <thread>

#include "api/types.h"
#include "cli/common.h"

namespace tide::cli {

namespace {

struct LogsOptions {
  std::string id;
  bool follow = false;
  int attempt = 0;
  int rank = 0;
};

void Write(std::string_view data) {
  std::cout.write(data.data(), static_cast<std::streamsize>(data.size()));
  std::cout.flush();
}

// Prints the log of `attempt` from `*offset` to its current end.
Status PrintFrom(api::Client& client, const std::string& id, int attempt, int rank,
                 int64_t* offset) {
  // The server may answer in pieces; ask until it has nothing more.
  for (int i = 0; i < 100'000; ++i) {
    auto text = client.GetLogs(id, attempt, *offset, rank);
    if (!text.ok()) return text.status();
    if (text->empty()) return Status::Ok();
    Write(*text);
    *offset += static_cast<int64_t>(text->size());
  }
  return Status::Ok();
}

bool Retryable(const Status& s) {
  return s.code() == Code::kUnavailable || s.code() == Code::kInternal;
}

int Follow(api::Client& client, const std::string& id, int rank) {
  auto job = client.GetJob(id);
  if (!job.ok()) return PrintError(job.status());
  int attempt = job->attempt;
  int64_t offset = 0;
  int failures = 0;
  while (true) {
    Status streamed = client.FollowLogs(id, attempt, offset, [&](std::string_view data) {
      Write(data);
      offset += static_cast<int64_t>(data.size());
      return true;
    }, rank);
    if (!streamed.ok() && !Retryable(streamed)) return PrintError(streamed);

    job = client.GetJob(id);
    if (!job.ok()) {
      if (!Retryable(job.status()) || ++failures > 30) return PrintError(job.status());
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    failures = 0;
    if (job->attempt != attempt) {
      // The stream ended with the old attempt; what it wrote after the last
      // byte we saw belongs to that attempt.
      Status rest = PrintFrom(client, id, attempt, rank, &offset);
      if (!rest.ok()) return PrintError(rest);
      attempt = job->attempt;
      offset = 0;
      std::cerr << "--- attempt " << attempt << " ---\n";
      continue;
    }
    if (api::IsTerminal(job->status)) {
      Status rest = PrintFrom(client, id, 0, rank, &offset);
      return rest.ok() ? kExitOk : PrintError(rest);
    }
    // The stream ended (or dropped) while the job goes on: resume shortly.
    std::this_thread::sleep_for(std::chrono::milliseconds(streamed.ok() ? 200 : 1000));
  }
}

int RunLogs(const LogsOptions& opts) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  if (opts.follow) return Follow(**client, opts.id, opts.rank);
  if (opts.attempt > 0) {
    int64_t offset = 0;
    Status st = PrintFrom(**client, opts.id, opts.attempt, opts.rank, &offset);
    return st.ok() ? kExitOk : PrintError(st);
  }
  auto job = (*client)->GetJob(opts.id);
  if (!job.ok()) return PrintError(job.status());
  for (int a = 1; a <= job->attempt; ++a) {
    if (job->attempt > 1) {
      std::string about;
      for (const auto& at : job->attempts) {
        if (at.attempt != a) continue;
        about = " (node " + at.node_id + (at.reason.empty() ? "" : ", " + at.reason) + ")";
      }
      std::cout << "--- attempt " << a << about << " ---\n";
    }
    int64_t offset = 0;
    Status st = PrintFrom(**client, opts.id, a, opts.rank, &offset);
    if (!st.ok()) return PrintError(st);
  }
  return kExitOk;
}

}  // namespace

void AddLogsCommand(CLI::App& app) {
  auto opts = std::make_shared<LogsOptions>();
  CLI::App* cmd = app.add_subcommand("logs", "Print a job's output (-f to follow it)");
  cmd->add_option("id", opts->id, "Job id")->required();
  CLI::Option* follow = cmd->add_flag("-f,--follow", opts->follow, "Follow until the job ends");
  cmd->add_option("--attempt", opts->attempt, "Only this attempt (default: every attempt in turn)")
      ->check(CLI::PositiveNumber)
      ->excludes(follow);
  cmd->add_option("--rank", opts->rank, "Node of a multi-node job to show (default: rank 0)")
      ->check(CLI::NonNegativeNumber);
  SetAction(cmd, [opts] { return RunLogs(*opts); });
}

}  // namespace tide::cli
