// The `tide` binary: every process and command of Tide behind one CLI11 app.
//
//   tide server   the control plane (server/server.h)
//   tide agent    runs jobs on a GPU machine (agent/agent.h); `tide agent check`
//                 says what isolation the host supports (agent/check.h)
//   tide dev      server + local agent in one command (cmd/dev.h)
//   tide version
//   tide submit | ls | status | logs | cancel | wait | outputs | nodes | top | admin
//                 the user and admin commands (cli/)
#include <csignal>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string_view>
#include <vector>

#include "agent/agent.h"
#include "agent/check.h"
#include "api/types.h"
#include "cli/common.h"
#include "common/tls.h"
#include "cmd/dev.h"
#include "cmd/sim.h"
#include "common/duration.h"
#include "ledger/money.h"
#include "server/server.h"

namespace tide::cmd {

namespace {

constexpr const char* kVersion = "0.1.0";

// Parses a duration flag into `*ms`; usage error otherwise.
void AddDurationMs(CLI::App* cmd, const std::string& name, int64_t* ms, const std::string& help) {
  cmd->add_option_function<std::string>(
         name,
         [ms, name](const std::string& text) {
           auto parsed = cli::ParseDurationMs(text);
           if (!parsed.ok()) throw CLI::ValidationError(name, parsed.status().message());
           if (*parsed <= 0) throw CLI::ValidationError(name, "must be positive");
           *ms = *parsed;
         },
         help)
      ->default_str(*ms % 1000 == 0 ? FormatDurationSeconds(*ms / 1000)
                                    : std::to_string(*ms) + "ms");
}

// A duration flag of at least `min_ms`, or the word `none` for 0 (no limit).
void AddDurationOrNone(CLI::App* cmd, const std::string& name, const std::string& none,
                       int64_t min_ms, int64_t* ms, const std::string& help,
                       const std::string& default_text) {
  cmd->add_option_function<std::string>(
         name,
         [=](const std::string& text) {
           if (text == none) {
             *ms = 0;
             return;
           }
           auto parsed = cli::ParseDurationMs(text);
           if (!parsed.ok() || *parsed < min_ms) {
             throw CLI::ValidationError(name, "a duration of at least " +
                                                  FormatDurationSeconds(min_ms / 1000) +
                                                  " (e.g. 30d), or " + none);
           }
           *ms = *parsed;
         },
         help)
      ->default_str(default_text);
}

const std::vector<std::string> kLogLevels = {"trace", "debug", "info", "warn", "error"};

void AddServerCommand(CLI::App& app) {
  auto opts = std::make_shared<server::ServerOptions>();
  CLI::App* cmd = app.add_subcommand("server", "Run the control plane (API, dashboard, metrics)");
  cmd->add_option("--listen", opts->listen, "Address HOST:PORT (port 0 picks a free one)")
      ->capture_default_str();
  cmd->add_option("--data-dir", opts->data_dir, "State: tide.db, blobs/, admin.token")
      ->capture_default_str();
  AddDurationMs(cmd, "--node-timeout", &opts->node_timeout_ms,
                "A node whose heartbeats stop this long is lost, e.g. 10s");
  AddDurationOrNone(cmd, "--node-token-life", "never", 3'000, &opts->node_token_life_ms,
                    "How long an agent's node token lives; agents get a new one in a heartbeat "
                    "once a third is left (e.g. 30d, or never)",
                    "30d");
  AddDurationOrNone(cmd, "--retention", "forever", 60'000, &opts->retention_ms,
                    "Delete an ended job's logs, outputs, checkpoints and code this long after it "
                    "ends, as tide rm does (e.g. 30d, or forever); the billing record stays",
                    "forever");
  AddDurationMs(cmd, "--low-utilization-window", &opts->low_utilization_window_ms,
                "A running job whose GPUs average under 10% utilisation this long is flagged "
                "`low GPU utilisation` in tide status and tide top, e.g. 10m");
  cmd->add_option("--log-level", opts->log_level, "trace, debug, info, warn or error")
      ->capture_default_str()
      ->check(CLI::IsMember(kLogLevels));
  cmd->add_option("--port-file", opts->port_file, "Write the actual HOST:PORT here once listening");
  cmd->add_option("--tls-cert", opts->tls_cert,
                  "Serve HTTPS with this certificate chain (PEM); reloaded on SIGHUP or when "
                  "the file is replaced")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tls-key", opts->tls_key, "The certificate's private key (PEM)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tls-next-key", opts->tls_next_key,
                  "The key (PEM) of the next certificate: its pin is announced to agents, so "
                  "a rotation to it keeps them connected")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--tls-self-signed", opts->tls_self_signed,
                "Serve HTTPS with a self-signed certificate kept in DATA_DIR/tls, even on "
                "loopback (the default beyond loopback when no --tls-cert is given)");
  cmd->add_option("--token-rate-limit", opts->token_rate_limit,
                  "Requests per second of each user or admin token, RATE/s[:BURST] or off; "
                  "beyond it a 429 with Retry-After")
      ->capture_default_str();
  cmd->add_option("--address-rate-limit", opts->address_rate_limit,
                  "Requests per second of each address that sends no valid token")
      ->capture_default_str();
  cmd->add_option("--token-inflight-limit", opts->token_inflight_limit,
                  "Requests of each user or admin token open at once (log follows and waits "
                  "included), or off; beyond it a 429")
      ->capture_default_str();
  cmd->add_flag("--insecure-http", opts->insecure_http,
                "Serve plain HTTP beyond loopback: tokens and code cross the network in clear text");
  cli::SetAction(cmd, [opts] { return server::RunServer(*opts); });
}

void AddAgentCommand(CLI::App& app) {
  auto opts = std::make_shared<agent::AgentOptions>();
  CLI::App* cmd = app.add_subcommand("agent", "Run jobs on this machine's GPUs for a server");
  cmd->add_option("--server", opts->server, "Server URL")
      ->envname("TIDE_SERVER")
      ->capture_default_str();
  cmd->add_option("--join-token", opts->join_token,
                  "Join token (first start only; later DATA_DIR/node.token is used)")
      ->envname("TIDE_JOIN_TOKEN");
  cmd->add_option("--ca-file", opts->ca_file,
                  "PEM file of the CAs an https:// server's certificate must chain to")
      ->envname("TIDE_CA_FILE");
  cmd->add_option_function<std::string>(
         "--pin",
         [opts](const std::string& text) {
           auto pins = tls::ParsePins(text, "--pin");
           if (!pins.ok()) throw CLI::ValidationError("--pin", pins.status().message());
           opts->pins = *pins;
         },
         "Trust the https:// server by its key's pin (sha256:...); a join token carries it already")
      ->envname("TIDE_PIN");
  cmd->add_option("--data-dir", opts->data_dir, "State: node.token, server.pins, job work directories")
      ->capture_default_str();
  cmd->add_option("--name", opts->name, "Node name (default: the host name)");
  cmd->add_option("--fake-gpus", opts->fake_gpus,
                  "Pretend GPUs instead of NVML, e.g. 4xRTX4090:24GB,2xA100:80GB");
  cmd->add_option_function<std::vector<std::string>>(
         "--label",
         [opts](const std::vector<std::string>& labels) {
           for (const auto& l : labels) {
             auto eq = l.find('=');
             std::string why = eq == std::string::npos ? "use KEY=VALUE"
                                                       : api::CheckLabel(l.substr(0, eq), l.substr(eq + 1));
             if (!why.empty()) throw CLI::ValidationError("--label " + l, why);
             opts->labels[l.substr(0, eq)] = l.substr(eq + 1);
           }
         },
         "Node label jobs can require with constraints, e.g. region=eu (repeatable)")
      ->take_all();
  cmd->add_option_function<std::vector<std::string>>(
         "--price",
         [opts](const std::vector<std::string>& prices) {
           for (const auto& p : prices) {
             auto eq = p.find('=');
             if (eq == std::string::npos || eq == 0) {
               throw CLI::ValidationError("--price " + p, "use MODEL=CREDITS_PER_GPU_HOUR");
             }
             auto v = ledger::ParseCredits(p.substr(eq + 1), "price");
             if (!v.ok()) throw CLI::ValidationError("--price " + p, v.status().message());
             opts->prices[api::CanonicalGpuModel(p.substr(0, eq))] = *v;
           }
         },
         "Your ask per GPU model in credits per GPU-hour, e.g. RTX4090=0.35 (repeatable)")
      ->take_all();
  cmd->add_option("--advertise-addr", opts->advertise_addr,
                  "Address other nodes of a multi-node job reach this one at (MASTER_ADDR); "
                  "default: the address the server sees")
      ->check([](const std::string& v) { return api::CheckAddress(v); });
  cmd->add_option("--cpus", opts->cpus,
                  "CPUs this host offers jobs (their resources.cpus are placed against it); "
                  "default: every online CPU")
      ->check(CLI::Range(0.0, 65'536.0));
  cmd->add_option_function<std::string>(
         "--memory",
         [opts](const std::string& text) {
           auto mb = api::ParseMemoryMb(text);
           if (!mb.ok() || *mb <= 0) {
             throw CLI::ValidationError("--memory " + text, "want a size such as 64GB");
           }
           opts->memory_mb = *mb;
         },
         "Memory this host offers jobs, e.g. 64GB (their resources.memory is placed against "
         "it); default: all of the host's");
  AddDurationMs(cmd, "--heartbeat-interval", &opts->heartbeat_interval_ms,
                "Time between heartbeats, e.g. 2s or 500ms");
  cmd->add_option("--job-pids-limit", opts->job_pids_limit,
                  "Processes and threads one job may have at once (its cgroup's pids.max)")
      ->check(CLI::Range(int64_t{64}, int64_t{1} << 22));
  cmd->add_option("--runtime", opts->runtime,
                  "How jobs run: sandbox (bubblewrap, a uid per job, seccomp, no network unless "
                  "asked), oci (runc containers over --image root filesystems, contained alike) "
                  "or process (plain processes as the agent's user: development only)")
      ->capture_default_str()
      ->check(CLI::IsMember({"sandbox", "oci", "process"}));
  cmd->add_option("--image", opts->images,
                  "With --runtime oci: an image this agent offers, NAME=ROOTFS (a prepared root "
                  "filesystem directory); repeat for more");
  cmd->add_flag("--insecure-process-runtime", opts->insecure_process_runtime,
                "Allow --runtime process: jobs can then read the node token and the whole host");
  cmd->add_option("--job-uids", opts->job_uids,
                  "Host uids for sandboxed jobs, FIRST-LAST; none may belong to a user")
      ->capture_default_str();
  cmd->add_option("--uid-lock-dir", opts->uid_lock_dir,
                  "Where the agents of this host claim job uids")
      ->capture_default_str();
  cmd->add_option("--gpu-dev-root", opts->gpu_dev_root,
                  "Where the GPU device nodes (nvidia0, nvidiactl, ...) are found")
      ->capture_default_str();
  AddDurationMs(cmd, "--checkpoint-interval", &opts->checkpoint_interval_ms,
                "How often a running job's changed TIDE_CHECKPOINT_DIR is uploaded, e.g. 5m "
                "(a job's checkpoint_interval wins)");
  cmd->add_option("--log-level", opts->log_level, "trace, debug, info, warn or error")
      ->capture_default_str()
      ->check(CLI::IsMember(kLogLevels));
  CLI::App* check =
      cmd->add_subcommand("check", "Print what isolation this host supports for jobs, and why");
  cli::SetAction(check, [] { return agent::RunAgentCheck(); });
  cli::SetAction(cmd, [opts, check] {
    if (check->parsed()) return cli::kExitOk;
    return agent::RunAgent(*opts);
  });
}

void AddVersionCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("version", "Print the version");
  cli::SetAction(cmd, [] {
    std::cout << "tide " << kVersion << "\n";
    return cli::kExitOk;
  });
}

// The command a command line names: its first word that is not an option
// (nor the value of --ca-file or --pin); "" when there is none.
std::string CommandWord(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--ca-file" || a == "--pin") {
      ++i;
    } else if (a.empty() || a[0] != '-') {
      return a;
    }
  }
  return "";
}

// The edit distance of two words (insertions, deletions, substitutions).
size_t Distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// A word that names no command is said so, with the nearest command.
int UnknownCommand(CLI::App& app, const std::string& word) {
  std::string nearest;
  size_t best = 3;  // farther than two edits suggests nothing
  for (const CLI::App* c : app.get_subcommands([](CLI::App*) { return true; })) {
    size_t d = Distance(word, c->get_name());
    if (d < best) {
      best = d;
      nearest = c->get_name();
    }
  }
  std::cerr << "tide: \"" << word << "\" is not a command"
            << (nearest.empty() ? "" : "; did you mean \"" + nearest + "\"?") << "\n"
            << "Run tide --help for the list of commands.\n";
  return cli::kExitUsage;
}

// Help lists commands by what they are for.
void Group(CLI::App& app, const std::vector<std::string>& names, const std::string& group) {
  for (const auto& name : names) {
    app.get_subcommand(name)->group(group);
  }
}

}  // namespace

}  // namespace tide::cmd

int main(int argc, char** argv) {
  using namespace tide;
  // A shell starts background commands with SIGINT ignored, and an ignored
  // signal never reaches the sigwait() loops of server, agent and dev.
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  // The version alone needs no command built (a script's check of the
  // installed tide stays as cheap as a program that prints a line).
  if (argc == 2 && std::string_view(argv[1]) == "--version") {
    std::cout << "tide " << cmd::kVersion << "\n";
    return cli::kExitOk;
  }
  CLI::App app{"Tide: GPU batch scheduler. Submit jobs, follow them, get their outputs.", "tide"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tide ") + cmd::kVersion);
  // How an https:// server is trusted (api::Client reads these variables).
  app.add_option_function<std::string>(
         "--ca-file", [](const std::string& f) { setenv("TIDE_CA_FILE", f.c_str(), 1); },
         "PEM file of the CAs an https:// server's certificate must chain to (default: the "
         "system's)")
      ->envname("TIDE_CA_FILE");
  app.add_option_function<std::string>(
         "--pin", [](const std::string& p) { setenv("TIDE_PIN", p.c_str(), 1); },
         "Trust an https:// server by its key's pin (sha256:..., as tide server prints it; "
         "comma-separated for several) instead of a CA")
      ->envname("TIDE_PIN");
  // Only the command asked for is built (building all of them is a good part
  // of a short command's start, docs/benchmarks.md); help, --version and a
  // word that names no command get them all.
  std::vector<cli::AddCommands> adders = {cmd::AddVersionCommand};
  for (cli::AddCommands add : cli::UserCommands()) adders.push_back(add);
  for (cli::AddCommands add :
       {cmd::AddServerCommand, cmd::AddAgentCommand, cmd::AddDevCommand, cmd::AddSimCommand}) {
    adders.push_back(add);
  }
  const std::string word = cmd::CommandWord(argc, argv);
  bool all = true;
  for (cli::AddCommands add : adders) {
    add(app);
    if (!word.empty() && !app.get_subcommands([&](CLI::App* c) { return c->check_name(word); }).empty()) {
      all = false;
      break;
    }
  }
  if (!all) return cli::RunCli(app, argc, argv);
  if (!word.empty()) return cmd::UnknownCommand(app, word);
  // Grouped by who uses them; FirstDayTest.HelpGroupsEveryCommand fails on
  // a command left out of every group.
  cmd::Group(app, {"dev", "version"}, "Start here");
  cmd::Group(app, {"submit", "sbatch", "batch", "ls", "status", "logs", "metrics", "cancel", "wait",
                   "outputs", "rm"},
             "Run jobs (users)");
  cmd::Group(app, {"redeem", "balance", "usage", "estimate", "token"},
             "Credit, cost and tokens (users)");
  cmd::Group(app, {"queue", "nodes", "top"}, "Look at the cluster (everyone)");
  cmd::Group(app, {"agent", "provider"}, "Lend GPUs (providers)");
  cmd::Group(app, {"server", "admin", "sim"}, "Operate (operators; admin needs the admin token)");
  // After the subcommands: they would inherit it.
  app.footer(
      "Start here: `tide dev`, then in another shell the export lines it prints and\n"
      "`tide submit -- nvidia-smi`. Every command takes --help; every listing takes -o json.\n"
      "Environment: TIDE_SERVER (default http://127.0.0.1:7460), TIDE_TOKEN (your API token),\n"
      "TIDE_PIN or TIDE_CA_FILE (how an https:// server is trusted: --pin, --ca-file).\n"
      "Admin commands read TIDE_ADMIN_TOKEN, else TIDE_TOKEN, else ./.tide/server/admin.token.");
  return cli::RunCli(app, argc, argv);
}
