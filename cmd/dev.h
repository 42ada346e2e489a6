// `tide dev`: a server and one local agent for trying Tide on one machine.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace tide::cmd {

struct DevOptions {
  std::string listen = "127.0.0.1:7460";
  std::string data_dir = ".tide";  // server/, agent/, dev.token
  std::string fake_gpus;           // empty: real GPUs if NVML is there, else 4xRTX4090:24GB
  std::string log_level = "info";
};

// Starts `tide server` and `tide agent` as child processes of this one,
// creates (once) a user "dev" whose token is kept in DATA_DIR/dev.token,
// prints the dashboard URL and the environment to use the CLI, then waits.
// SIGINT/SIGTERM stop the agent, then the server; if either child dies the
// other is stopped and the exit code is 1. Returns the exit code.
int RunDev(const DevOptions& options);

void AddDevCommand(CLI::App& app);

// "0.0.0.0:7460" -> "http://127.0.0.1:7460": where a local client connects.
std::string LocalUrl(const std::string& listen);

}  // namespace tide::cmd
