#include "cli/common.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <tuple>

#include "common/clock.h"
#include "common/duration.h"
#include "common/paths.h"

namespace tide::cli {

namespace {

// The commands whose words after "--" are a command line to run.
const std::vector<std::string>& CommandsTakingTrailingArgs() {
  static const std::vector<std::string> kCommands = {"submit", "batch"};
  return kCommands;
}

std::vector<std::string>& MutableTrailingArgs() {
  static std::vector<std::string> args;
  return args;
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

const std::vector<AddCommands>& UserCommands() {
  static const std::vector<AddCommands> all = {
      AddSubmitCommand, AddListCommand,    AddStatusCommand,  AddLogsCommand,  AddCancelCommand,
      AddRmCommand,     AddWaitCommand,    AddOutputsCommand, AddNodesCommand, AddQueueCommand,
      AddAdminCommands, AddMoneyCommands,  AddMetricsCommand, AddBatchCommands, AddSbatchCommand,
      AddTopCommand,    AddTokenCommands};
  return all;
}

void AddUserCommands(CLI::App& app) {
  for (AddCommands add : UserCommands()) add(app);
}

std::vector<std::string> SplitTrailingArgs(std::vector<std::string>* args,
                                           const std::vector<std::string>& commands) {
  auto first_word = std::find_if(args->begin(), args->end(),
                                 [](const std::string& a) { return a.empty() || a[0] != '-'; });
  if (first_word == args->end()) return {};
  if (std::find(commands.begin(), commands.end(), *first_word) == commands.end()) return {};
  auto dashes = std::find(first_word, args->end(), "--");
  if (dashes == args->end()) return {};
  std::vector<std::string> trailing(dashes + 1, args->end());
  args->erase(dashes, args->end());
  return trailing;
}

const std::vector<std::string>& TrailingArgs() { return MutableTrailingArgs(); }

int RunCli(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  MutableTrailingArgs() = SplitTrailingArgs(&args, CommandsTakingTrailingArgs());
  std::reverse(args.begin(), args.end());  // CLI11 consumes from the back
  try {
    app.parse(args);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    (void)app.exit(e);
    return kExitUsage;
  }
  return kExitOk;
}

void SetAction(CLI::App* cmd, std::function<int()> run) {
  // A command that also has subcommands (tide admin join-token ls) runs
  // its own action only when none of them was chosen.
  cmd->callback([cmd, run = std::move(run)] {
    if (!cmd->get_subcommands().empty()) return;
    int code = run();
    if (code != kExitOk) throw CLI::RuntimeError(code);
  });
}

// ---------------------------------------------------------------- connection

Connection ConnectionFromEnv(bool admin) {
  Connection c;
  c.server = Getenv("TIDE_SERVER");
  if (c.server.empty()) c.server = kDefaultServer;
  if (c.server.find("://") == std::string::npos) c.server = "http://" + c.server;
  while (c.server.size() > 8 && c.server.back() == '/') c.server.pop_back();
  if (admin) c.token = Getenv("TIDE_ADMIN_TOKEN");
  if (c.token.empty()) c.token = Getenv("TIDE_TOKEN");
  // The tour exports a user's TIDE_TOKEN beside `tide dev`: an admin
  // command then takes the dev admin token, not a user token it would be
  // refused with.
  const bool user_token = c.token.rfind("tide_u_", 0) == 0;
  if (admin && (c.token.empty() || (user_token && Getenv("TIDE_ADMIN_TOKEN").empty()))) {
    auto file = ReadFile(kDevAdminTokenFile);
    if (file.ok()) c.token = Trim(*file);
  }
  return c;
}

Result<std::unique_ptr<api::Client>> NewClient(bool admin) {
  Connection c = ConnectionFromEnv(admin);
  auto client = api::Client::Create(c.server, c.token);
  if (!client.ok()) return client.status().WithContext("TIDE_SERVER=" + c.server);
  return client;
}

// ---------------------------------------------------------------- output

void AddOutputFlag(CLI::App* cmd, OutputFormat* format, bool csv) {
  std::vector<std::string> names = {"table", "json"};
  if (csv) names.push_back("csv");
  cmd->add_option_function<std::string>(
         "-o,--output",
         [format](const std::string& text) {
           *format = text == "json"  ? OutputFormat::kJson
                     : text == "csv" ? OutputFormat::kCsv
                                     : OutputFormat::kTable;
         },
         "Output format (default: table)")
      ->check(CLI::IsMember(names))
      ->option_text(csv ? "json|table|csv" : "json|table");
}

std::string JsonText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump();
}

std::string CsvField(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

void PrintJson(const json& value) {
  std::cout << value.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  std::cout.flush();
}

std::string FormatError(const Status& status) {
  std::string msg = status.message();
  const std::string& field = status.field();
  if (!field.empty() && msg.find(field) == std::string::npos) msg = field + " " + msg;
  std::string out = "error: " + msg;
  if (!field.empty()) out += " (field: " + field + ")";
  return out;
}

int PrintError(const Status& status) {
  std::cout.flush();
  std::cerr << FormatError(status) << "\n";
  switch (status.code()) {
    case Code::kUnavailable:
      std::cerr << "hint: is a Tide server running at " << ConnectionFromEnv(false).server
                << "? Set TIDE_SERVER, or start one with `tide dev`.\n";
      break;
    case Code::kUnauthenticated:
      std::cerr << "hint: set TIDE_TOKEN to your API token (`tide dev` prints one).\n";
      break;
    default: break;
  }
  return kExitError;
}

std::string Table::ToString() const {
  std::vector<size_t> widths(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  };
  measure(header_);
  for (const auto& row : rows_) measure(row);
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < widths.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      line += cell;
      if (i + 1 < widths.size()) line += std::string(widths[i] - cell.size() + 3, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(header_);
  for (const auto& row : rows_) emit(row);
  return out;
}

// ---------------------------------------------------------------- formatting

int64_t NowMs() { return SystemClock::Default()->NowMs(); }

std::string FormatAge(int64_t now_ms, int64_t then_ms) {
  if (then_ms <= 0) return "-";
  int64_t s = std::max<int64_t>(0, (now_ms - then_ms) / 1000);
  if (s < 120) return std::to_string(s) + "s";
  if (s < 120 * 60) return std::to_string(s / 60) + "m";
  if (s < 48 * 3600) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

Result<int64_t> ParseSince(const std::string& text, int64_t now_ms) {
  if (auto d = ParseDurationSeconds(text); d.ok()) return now_ms - *d * 1000;
  std::tm tm{};
  if (text.size() == 10 && strptime(text.c_str(), "%Y-%m-%d", &tm) != nullptr) {
    return static_cast<int64_t>(timegm(&tm)) * 1000;
  }
  return Status::InvalidArgument("must be a duration ago (7d, 24h) or a date (2026-12-01)", "since");
}

std::string FormatTimestamp(int64_t now_ms, int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  std::string t = FormatTime(unix_ms);
  if (now_ms >= unix_ms) t += " (" + FormatAge(now_ms, unix_ms) + " ago)";
  return t;
}

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = -1;
  while (v >= 1024 && unit < 3) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  return buf;
}

std::string FormatMemoryMb(int64_t mb) {
  if (mb <= 0) return "";
  if (mb % 1024 == 0) return std::to_string(mb / 1024) + "GB";
  if (mb > 10 * 1024) return std::to_string((mb + 512) / 1024) + "GB";
  return std::to_string(mb) + "MB";
}

std::string FormatJobGpus(const json& job) {
  const json* res =
      job.contains("resources") && job["resources"].is_object() ? &job["resources"] : nullptr;
  if (!res) return "-";
  int64_t count = JsonInt(*res, "gpu_count");
  std::string types;
  if (res->contains("gpu_type")) {
    const json& t = (*res)["gpu_type"];
    if (t.is_string()) {
      types = t.get<std::string>();
    } else if (t.is_array()) {
      for (const auto& v : t) {
        if (!v.is_string()) continue;
        if (!types.empty()) types += "|";
        types += v.get<std::string>();
      }
    }
  }
  int64_t mem = 0;
  if (res->contains("gpu_memory") && (*res)["gpu_memory"].is_number_integer()) {
    mem = (*res)["gpu_memory"].get<int64_t>();
  }
  std::string out = std::to_string(count);
  if (int64_t nodes = JsonInt(*res, "nodes"); nodes > 1) {
    out = std::to_string(nodes) + " nodes x " + out;
  }
  if (!types.empty() || mem > 0) out += "x";
  if (!types.empty()) out += " " + types;
  if (mem > 0) out += " " + FormatMemoryMb(mem);
  return out;
}

std::string FormatNodeGpus(const json& node) {
  if (!node.contains("gpus") || !node["gpus"].is_array() || node["gpus"].empty()) return "-";
  // Keep the order in which models first appear.
  std::vector<std::tuple<std::string, int64_t, int>> groups;
  for (const auto& g : node["gpus"]) {
    std::string model = JsonString(g, "model");
    if (model.empty()) model = JsonString(g, "name");
    int64_t mem = JsonInt(g, "memory_mb");
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& grp) {
      return std::get<0>(grp) == model && std::get<1>(grp) == mem;
    });
    if (it == groups.end()) {
      groups.emplace_back(model, mem, 1);
    } else {
      ++std::get<2>(*it);
    }
  }
  std::string out;
  for (const auto& [model, mem, n] : groups) {
    if (!out.empty()) out += ", ";
    out += std::to_string(n) + "x " + model;
    if (mem > 0) out += " " + FormatMemoryMb(mem);
  }
  return out;
}

std::string NodeStateText(const json& node) {
  std::string state = JsonString(node, "state");
  if (state == "ready" && node.value("draining", false)) return "draining";
  return state.empty() ? "-" : state;
}

namespace {
// The GPUs of `node` that reported `key` (>= 0).
std::vector<const json*> Reporting(const json& node, const char* key) {
  std::vector<const json*> out;
  if (!node.contains("gpus") || !node["gpus"].is_array()) return out;
  for (const auto& g : node["gpus"]) {
    if (g.contains(key) && g[key].is_number() && g[key].get<double>() >= 0) out.push_back(&g);
  }
  return out;
}
}  // namespace

std::string FormatPercent(double pct) {
  if (pct < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", pct);
  return buf;
}

std::string FormatGib(double mb) {
  if (mb < 0) return "-";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f GiB", mb / 1024.0);
  return buf;
}

std::string NodeGpuUtilization(const json& node) {
  auto gpus = Reporting(node, "utilization_pct");
  if (gpus.empty()) return "-";
  double sum = 0;
  for (const json* g : gpus) sum += (*g)["utilization_pct"].get<double>();
  return FormatPercent(sum / static_cast<double>(gpus.size()));
}

std::string NodeGpuMemory(const json& node) {
  auto gpus = Reporting(node, "memory_used_mb");
  if (gpus.empty()) return "-";
  double used = 0, total = 0;
  for (const json* g : gpus) {
    used += (*g)["memory_used_mb"].get<double>();
    total += static_cast<double>(JsonInt(*g, "memory_mb"));
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f/%.1f GiB", used / 1024.0, total / 1024.0);
  return buf;
}

std::string NodeGpuTemperature(const json& node) {
  auto gpus = Reporting(node, "temperature_c");
  if (gpus.empty()) return "-";
  int64_t hottest = 0;
  for (const json* g : gpus) hottest = std::max(hottest, JsonInt(*g, "temperature_c"));
  return std::to_string(hottest) + "C";
}

Result<int64_t> ParseDurationMs(std::string_view text) {
  if (text.size() > 2 && text.substr(text.size() - 2) == "ms") {
    std::string_view digits = text.substr(0, text.size() - 2);
    if (digits.size() > 15 || !std::all_of(digits.begin(), digits.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c));
        })) {
      return Status::InvalidArgument("bad duration \"" + std::string(text) +
                                     "\": expected e.g. 500ms, 30s or 2m");
    }
    return std::stoll(std::string(digits));
  }
  auto s = ParseDurationSeconds(text);
  if (!s.ok()) return s.status();
  if (*s > std::numeric_limits<int64_t>::max() / 1000) {
    return Status::InvalidArgument("duration \"" + std::string(text) + "\" is too large");
  }
  return *s * 1000;
}

std::string JsonString(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

int64_t JsonInt(const json& j, const char* key) {
  if (!j.is_object()) return 0;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return 0;
  return it->is_number_integer() ? it->get<int64_t>() : static_cast<int64_t>(it->get<double>());
}

}  // namespace tide::cli
