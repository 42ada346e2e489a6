// Shared pieces of the user commands: the client from the environment, the
// `-o json|table` flag, tables, time and size formatting, error printing and
// exit codes.
//
// Environment:
//   TIDE_SERVER        API address (default http://127.0.0.1:7460)
//   TIDE_TOKEN         API token
//   TIDE_ADMIN_TOKEN   admin commands only; before TIDE_TOKEN. Without
//                      either, or when TIDE_TOKEN is a user's (tide_u_…),
//                      admin commands read ./.tide/server/admin.token (what
//                      `tide dev` leaves behind) if it is there.
//
// Exit codes: 0 ok, 1 error (including a failed or cancelled job for
// `tide wait`), 2 usage, 124 timeout.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/client.h"
#include "common/status.h"

namespace tide::cli {

using nlohmann::json;

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitTimeout = 124;

inline constexpr const char* kDefaultServer = "http://127.0.0.1:7460";
inline constexpr const char* kDevAdminTokenFile = ".tide/server/admin.token";

// The registration functions of every user and admin command (submit, ls,
// status, logs, cancel, wait, outputs, nodes, admin, ...), most used first.
using AddCommands = void (*)(CLI::App&);
const std::vector<AddCommands>& UserCommands();
// Registers every user and admin command on `app`.
void AddUserCommands(CLI::App& app);

// One registration function per command file.
void AddSubmitCommand(CLI::App& app);
void AddListCommand(CLI::App& app);
void AddStatusCommand(CLI::App& app);
void AddLogsCommand(CLI::App& app);
void AddCancelCommand(CLI::App& app);
void AddRmCommand(CLI::App& app);
void AddWaitCommand(CLI::App& app);
void AddOutputsCommand(CLI::App& app);
void AddNodesCommand(CLI::App& app);
void AddQueueCommand(CLI::App& app);
void AddAdminCommands(CLI::App& app);
void AddMoneyCommands(CLI::App& app);
void AddMetricsCommand(CLI::App& app);
void AddBatchCommands(CLI::App& app);
void AddSbatchCommand(CLI::App& app);
void AddTopCommand(CLI::App& app);
void AddTokenCommands(CLI::App& app);

// A JSON amount of credits (a number) as text with up to six decimals; "-"
// if absent.
std::string CreditsText(const json& j, const char* key);

// Parses argv and runs the chosen command; returns the process exit code.
// Usage errors print CLI11's message and give kExitUsage; --help gives 0.
//
// CLI11 drops "--" and would hand the words after it to SPEC_FILE, so for
// `tide submit ... -- COMMAND ARGS` the words after the first "--" are taken
// out here, before parsing, and kept for TrailingArgs().
int RunCli(CLI::App& app, int argc, char** argv);

// The words after "--" of the current invocation (empty if none).
const std::vector<std::string>& TrailingArgs();

// Splits `args` (argv without argv[0]) at the first "--" when the first word
// that is not an option is one of `commands`. Returns the words after "--"
// and removes them and the "--" from `args`.
std::vector<std::string> SplitTrailingArgs(std::vector<std::string>* args,
                                           const std::vector<std::string>& commands);

// Makes `run` the action of `cmd`. A non-zero result becomes the exit code.
void SetAction(CLI::App* cmd, std::function<int()> run);

// --- connection ---

struct Connection {
  std::string server;
  std::string token;
};

// Reads TIDE_SERVER and TIDE_TOKEN (admin: TIDE_ADMIN_TOKEN, TIDE_TOKEN, then
// the dev admin token file). A server without a scheme gets "http://".
Connection ConnectionFromEnv(bool admin);

Result<std::unique_ptr<api::Client>> NewClient(bool admin = false);

// --- output ---

// Plain enum class: CLI11 maps the flag's text to it through an int.
enum class OutputFormat { kTable, kJson, kCsv };

// Adds "-o,--output json|table" (default table), with `csv` "json|table|csv".
void AddOutputFlag(CLI::App* cmd, OutputFormat* format, bool csv = false);

// A JSON value as a table cell: strings as they are, null as "", the rest
// as JSON.
std::string JsonText(const json& value);

// One CSV field (RFC 4180): quoted when it holds a comma, quote or newline.
std::string CsvField(const std::string& text);

// Pretty JSON on stdout, with a newline.
void PrintJson(const json& value);

// Prints "error: <message> (field: <field>)" on stderr, with a hint for
// connection and authentication failures. Returns kExitError.
int PrintError(const Status& status);
// The text PrintError prints, without the hint and the newline.
std::string FormatError(const Status& status);

// Left-aligned columns separated by three spaces; headers in capitals.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  size_t size() const { return rows_.size(); }
  std::string ToString() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// --- formatting ---

int64_t NowMs();

// Compact elapsed time: "45s", "12m", "3h", "2d". 0 or a future time: "0s";
// `then_ms` == 0 (never): "-".
std::string FormatAge(int64_t now_ms, int64_t then_ms);

// "7d", "24h" (that long ago) or "2026-12-01" (UTC midnight) as unix ms;
// errors name --since.
Result<int64_t> ParseSince(const std::string& text, int64_t now_ms);

// "2026-12-02 17:16:50 UTC (5m ago)"; 0 gives "-".
std::string FormatTimestamp(int64_t now_ms, int64_t unix_ms);

// Sizes in powers of 1024: "512 B", "1.5 KiB", "24.0 MiB".
std::string FormatBytes(int64_t bytes);

// GPU memory in MiB as users write it: 24576 -> "24GB", 1536 -> "1536MB".
std::string FormatMemoryMb(int64_t mb);

// What a job asks for: "1", "2x RTX4090", "4x A100|H100 80GB".
std::string FormatJobGpus(const json& job);

// A node's GPUs grouped by model and memory: "4x RTX4090 24GB, 1x A100 80GB".
std::string FormatNodeGpus(const json& node);

// A node's state as users read it: "draining" for a ready node that takes no
// new jobs, else the server's state ("ready", "lost").
std::string NodeStateText(const json& node);

// A node's GPUs at their last heartbeat: average utilisation ("45%"),
// memory used of all ("29.0/48.0 GiB"), the hottest ("72C"); "-" when no
// GPU reported it.
std::string NodeGpuUtilization(const json& node);
std::string NodeGpuMemory(const json& node);
std::string NodeGpuTemperature(const json& node);

// A percentage without decimals: 12.6 -> "13%"; negative (unknown): "-".
std::string FormatPercent(double pct);

// MiB as GiB with one decimal: 14745.6 -> "14.4 GiB"; negative: "-".
std::string FormatGib(double mb);

// Durations as flags take them: "500ms", or anything ParseDurationSeconds
// takes ("90", "30s", "1h30m"). Returns milliseconds.
Result<int64_t> ParseDurationMs(std::string_view text);

// Safe accessors for server JSON (a missing or mistyped field gives the default).
std::string JsonString(const json& j, const char* key);
int64_t JsonInt(const json& j, const char* key);

}  // namespace tide::cli
