// Money commands (docs/money.md):
//
//   tide redeem CODE                 adds a compute card's value to your balance
//   tide balance                     available credit and what is held in escrow
//   tide usage [--since 7d|DATE]     what each job and attempt cost
//   tide estimate [SPEC] [--gpus N --gpu-type M --hours H --reserve 0.2]
//                                    what a job would cost, and when it would start
//   tide provider earnings           what your agents' nodes earned, per job
//
// Amounts print as credits with up to six decimals; -o json prints what the
// API answers.
#include <cmath>
#include <ctime>
#include <iostream>

#include "api/spec_file.h"
#include "cli/common.h"
#include "common/decimal.h"
#include "common/duration.h"

namespace tide::cli {

// A JSON amount of credits as text ("12.5"); "-" if absent.
std::string CreditsText(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return "-";
  return FormatCredits(std::llround(j[key].get<double>() * 1e6));
}

namespace {

int RunRedeem(const std::string& code, OutputFormat format) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("POST", "/v1/cards/redeem", json{{"code", code}});
  if (!answer.ok()) return PrintError(answer.status());
  if (format == OutputFormat::kJson) {
    PrintJson(*answer);
  } else {
    std::cout << "Redeemed " << CreditsText(*answer, "credited") << " credits; available now "
              << CreditsText(*answer, "available") << ".\n";
  }
  return kExitOk;
}

int RunBalance(OutputFormat format) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("GET", "/v1/account");
  if (!answer.ok()) return PrintError(answer.status());
  if (format == OutputFormat::kJson) {
    PrintJson(*answer);
  } else {
    std::cout << "Available   " << CreditsText(*answer, "available") << " credits\n"
              << "In escrow   " << CreditsText(*answer, "escrow")
              << " credits (held for jobs that have not ended)\n";
  }
  return kExitOk;
}

struct UsageOptions {
  std::string since;
  OutputFormat format = OutputFormat::kTable;
};

int RunUsage(const UsageOptions& opts) {
  std::string target = "/v1/usage";
  if (!opts.since.empty()) {
    auto since = ParseSince(opts.since, NowMs());
    if (!since.ok()) return PrintError(since.status());
    target += "?since=" + std::to_string(*since);
  }
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("GET", target);
  if (!answer.ok()) return PrintError(answer.status());
  if (opts.format == OutputFormat::kJson) {
    PrintJson(*answer);
    return kExitOk;
  }
  Table t({"JOB", "NAME", "ATTEMPT", "RANK", "GPU", "GPUS", "SECONDS", "RATE/GPU-H", "COST"});
  for (const auto& l : (*answer)["lines"]) {
    char seconds[32];
    snprintf(seconds, sizeof seconds, "%.1f", l.value("seconds", 0.0));
    t.AddRow({JsonString(l, "job_id"), JsonString(l, "name"), std::to_string(JsonInt(l, "attempt")),
              std::to_string(JsonInt(l, "rank")), JsonString(l, "gpu_model"),
              std::to_string(JsonInt(l, "gpus")), seconds, CreditsText(l, "rate"),
              CreditsText(l, "cost")});
  }
  std::cout << t.ToString() << "Total " << CreditsText(*answer, "total") << " credits\n";
  return kExitOk;
}

struct EstimateOptions {
  std::string spec_file;
  std::optional<int> gpus;
  std::optional<int> nodes;
  std::string gpu_type;
  std::string tier;
  double hours = 0;
  std::string reserve;
  OutputFormat format = OutputFormat::kTable;
};

int RunEstimate(const EstimateOptions& opts) {
  json body = json::object();
  if (!opts.spec_file.empty()) {
    auto spec = api::LoadSpecFile(opts.spec_file);
    if (!spec.ok()) return PrintError(spec.status());
    body = *spec;
  }
  if (opts.gpus) body["resources"]["gpu_count"] = *opts.gpus;
  if (opts.nodes) body["resources"]["nodes"] = *opts.nodes;
  if (!opts.gpu_type.empty()) body["resources"]["gpu_type"] = opts.gpu_type;
  if (!opts.tier.empty()) body["tier"] = opts.tier;
  if (opts.hours > 0) body["hours"] = opts.hours;
  if (!opts.reserve.empty()) body["reserve"] = opts.reserve;
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto e = (*client)->Call("POST", "/v1/estimate", body);
  if (!e.ok()) return PrintError(e.status());
  if (opts.format == OutputFormat::kJson) {
    PrintJson(*e);
    return kExitOk;
  }
  std::cout << "Rate      " << CreditsText(*e, "rate") << " credits per GPU-hour\n"
            << "GPUs      " << JsonInt(*e, "gpus") << "\n"
            << "Hours     " << e->value("hours", 0.0) << "\n"
            << "Base      " << CreditsText(*e, "base") << " credits\n"
            << "Reserve   " << CreditsText(*e, "reserve") << " credits\n"
            << "Total     " << CreditsText(*e, "total") << " credits\n";
  int64_t start = JsonInt(*e, "expected_start");
  int64_t now = NowMs();
  std::string never = JsonString(*e, "never_starts");
  std::cout << "Start     "
            << (!never.empty() ? "never as asked: " + never
                : start <= 0   ? std::string("unknown")
                : start <= now ? "now"
                               : "in " + FormatAge(start, now))
            << "\n";
  return kExitOk;
}

int RunEarnings(OutputFormat format) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto answer = (*client)->Call("GET", "/v1/provider/earnings");
  if (!answer.ok()) return PrintError(answer.status());
  if (format == OutputFormat::kJson) {
    PrintJson(*answer);
    return kExitOk;
  }
  Table t({"JOB", "ATTEMPT", "RANK", "NODE", "GPU-SECONDS", "PRICE/GPU-H", "FEE", "EARNED"});
  for (const auto& l : (*answer)["lines"]) {
    char seconds[32];
    snprintf(seconds, sizeof seconds, "%.1f", l.value("gpu_seconds", 0.0));
    t.AddRow({JsonString(l, "job_id"), std::to_string(JsonInt(l, "attempt")),
              std::to_string(JsonInt(l, "rank")), JsonString(l, "node_id"), seconds,
              CreditsText(l, "price"), CreditsText(l, "fee"), CreditsText(l, "earned")});
  }
  std::cout << t.ToString() << "Total earned " << CreditsText(*answer, "total_earned") << " credits\n";
  return kExitOk;
}

}  // namespace

void AddMoneyCommands(CLI::App& app) {
  {
    auto code = std::make_shared<std::string>();
    auto format = std::make_shared<OutputFormat>(OutputFormat::kTable);
    CLI::App* cmd = app.add_subcommand("redeem", "Add a compute card's credit to your balance");
    cmd->add_option("code", *code, "The card's code (TIDE-XXXX-...)")->required();
    AddOutputFlag(cmd, format.get());
    SetAction(cmd, [code, format] { return RunRedeem(*code, *format); });
  }
  {
    auto format = std::make_shared<OutputFormat>(OutputFormat::kTable);
    CLI::App* cmd = app.add_subcommand("balance", "Your available credit and what is in escrow");
    AddOutputFlag(cmd, format.get());
    SetAction(cmd, [format] { return RunBalance(*format); });
  }
  {
    auto opts = std::make_shared<UsageOptions>();
    CLI::App* cmd = app.add_subcommand("usage", "What each of your jobs and attempts cost");
    cmd->add_option("--since", opts->since, "Only what ran since: 7d, 24h, or 2026-12-01");
    AddOutputFlag(cmd, &opts->format);
    SetAction(cmd, [opts] { return RunUsage(*opts); });
  }
  {
    auto opts = std::make_shared<EstimateOptions>();
    CLI::App* cmd = app.add_subcommand("estimate", "What a job would cost, and when it would start");
    cmd->add_option("spec_file", opts->spec_file, "Job spec, YAML or JSON")->check(CLI::ExistingFile);
    cmd->add_option_function<int>("--gpus", [opts](int n) { opts->gpus = n; }, "GPUs (per node)");
    cmd->add_option_function<int>("-N,--nodes", [opts](int n) { opts->nodes = n; }, "Nodes");
    cmd->add_option("--gpu-type", opts->gpu_type, "GPU model, or a comma list");
    cmd->add_option("--tier", opts->tier, "on-demand or spot");
    cmd->add_option("--hours", opts->hours, "How long (default: the spec's max_runtime)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--reserve", opts->reserve, "Margin on top, as a fraction (default 0.2)");
    AddOutputFlag(cmd, &opts->format);
    SetAction(cmd, [opts] { return RunEstimate(*opts); });
  }
  {
    CLI::App* provider = app.add_subcommand("provider", "Commands for GPU providers");
    provider->require_subcommand(1);
    auto format = std::make_shared<OutputFormat>(OutputFormat::kTable);
    CLI::App* cmd = provider->add_subcommand("earnings", "What your nodes earned, per job");
    AddOutputFlag(cmd, format.get());
    SetAction(cmd, [format] { return RunEarnings(*format); });
  }
}

}  // namespace tide::cli
