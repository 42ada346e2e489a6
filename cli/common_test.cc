#include "cli/common.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace tide::cli {
namespace {

TEST(TableTest, AlignsColumnsAndTrimsTrailingSpace) {
  Table t({"ID", "NAME", "STATUS"});
  t.AddRow({"j-1", "train-resnet", "running"});
  t.AddRow({"j-22", "", "queued"});
  EXPECT_EQ(t.ToString(),
            "ID     NAME           STATUS\n"
            "j-1    train-resnet   running\n"
            "j-22                  queued\n");
}

TEST(TableTest, ShortRowsArePadded) {
  Table t({"A", "B"});
  t.AddRow({"x"});
  EXPECT_EQ(t.ToString(), "A   B\nx\n");
}

TEST(FormatTest, Age) {
  const int64_t now = 1'700'000'000'000;
  EXPECT_EQ(FormatAge(now, 0), "-");
  EXPECT_EQ(FormatAge(now, now + 5000), "0s");
  EXPECT_EQ(FormatAge(now, now - 45'000), "45s");
  EXPECT_EQ(FormatAge(now, now - 12 * 60'000), "12m");
  EXPECT_EQ(FormatAge(now, now - 3 * 3'600'000), "3h");
  EXPECT_EQ(FormatAge(now, now - 3 * 86'400'000LL), "3d");
}

TEST(FormatTest, Timestamp) {
  EXPECT_EQ(FormatTimestamp(1'700'000'060'000, 0), "-");
  EXPECT_EQ(FormatTimestamp(1'700'000'060'000, 1'700'000'000'000),
            "2023-11-14T22:13:20.000Z (60s ago)");
}

TEST(FormatTest, Bytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(24LL << 20), "24.0 MiB");
  EXPECT_EQ(FormatBytes(3LL << 40), "3.0 TiB");
}

TEST(FormatTest, MemoryMb) {
  EXPECT_EQ(FormatMemoryMb(24576), "24GB");
  EXPECT_EQ(FormatMemoryMb(24564), "24GB");  // what NVML reports for an RTX 4090
  EXPECT_EQ(FormatMemoryMb(1536), "1536MB");
  EXPECT_EQ(FormatMemoryMb(0), "");
}

TEST(FormatTest, JobGpus) {
  EXPECT_EQ(FormatJobGpus(json{{"resources", {{"gpu_count", 1}}}}), "1");
  EXPECT_EQ(FormatJobGpus(json{{"resources", {{"gpu_count", 2}, {"gpu_type", {"RTX4090"}}}}}),
            "2x RTX4090");
  EXPECT_EQ(FormatJobGpus(
                json{{"resources",
                      {{"gpu_count", 4}, {"gpu_type", {"A100", "H100"}}, {"gpu_memory", 81920}}}}),
            "4x A100|H100 80GB");
  EXPECT_EQ(FormatJobGpus(json{{"id", "j-1"}}), "-");
}

TEST(FormatTest, NodeGpusGroupsByModelAndMemory) {
  json node = {{"gpus", json::array()}};
  for (int i = 0; i < 4; ++i) node["gpus"].push_back({{"model", "RTX4090"}, {"memory_mb", 24576}});
  node["gpus"].push_back(
      {{"name", "NVIDIA A100-SXM4-80GB"}, {"model", "A100"}, {"memory_mb", 81920}});
  EXPECT_EQ(FormatNodeGpus(node), "4x RTX4090 24GB, 1x A100 80GB");
  EXPECT_EQ(FormatNodeGpus(json{{"gpus", json::array()}}), "-");
}

TEST(FormatTest, NodeStateAndGpuTelemetry) {
  json node = {{"state", "ready"}, {"draining", false}, {"gpus", json::array()}};
  node["gpus"].push_back({{"memory_mb", 24576}, {"utilization_pct", 90},
                          {"memory_used_mb", 14745}, {"temperature_c", 72}});
  node["gpus"].push_back({{"memory_mb", 24576}, {"utilization_pct", 0},
                          {"memory_used_mb", 0}, {"temperature_c", 35}});
  EXPECT_EQ(NodeStateText(node), "ready");
  EXPECT_EQ(NodeGpuUtilization(node), "45%");
  EXPECT_EQ(NodeGpuMemory(node), "14.4/48.0 GiB");
  EXPECT_EQ(NodeGpuTemperature(node), "72C");
  node["draining"] = true;
  EXPECT_EQ(NodeStateText(node), "draining");
  node["state"] = "lost";
  EXPECT_EQ(NodeStateText(node), "lost");
  // Not reported yet (-1): "-".
  json quiet = {{"state", "ready"},
                {"gpus", {{{"memory_mb", 100}, {"utilization_pct", -1}, {"memory_used_mb", -1},
                           {"temperature_c", -1}}}}};
  EXPECT_EQ(NodeGpuUtilization(quiet), "-");
  EXPECT_EQ(NodeGpuMemory(quiet), "-");
  EXPECT_EQ(NodeGpuTemperature(quiet), "-");
  EXPECT_EQ(FormatPercent(12.6), "13%");
  EXPECT_EQ(FormatPercent(-1), "-");
  EXPECT_EQ(FormatGib(14745.6), "14.4 GiB");
}

TEST(DurationTest, Milliseconds) {
  EXPECT_EQ(*ParseDurationMs("500ms"), 500);
  EXPECT_EQ(*ParseDurationMs("2s"), 2000);
  EXPECT_EQ(*ParseDurationMs("10m"), 600'000);
  EXPECT_EQ(*ParseDurationMs("90"), 90'000);
  EXPECT_FALSE(ParseDurationMs("ms").ok());
  EXPECT_FALSE(ParseDurationMs("1.5s").ok());
  EXPECT_FALSE(ParseDurationMs("-1s").ok());
  EXPECT_FALSE(ParseDurationMs("5x").ok());
}

TEST(ErrorTest, NamesTheField) {
  EXPECT_EQ(FormatError(Status::InvalidArgument("is required", "command")),
            "error: command is required (field: command)");
  EXPECT_EQ(FormatError(Status::InvalidArgument("job.yaml:3: resources.gpu_count: must be at "
                                                "least 1",
                                                "resources.gpu_count")),
            "error: job.yaml:3: resources.gpu_count: must be at least 1 (field: "
            "resources.gpu_count)");
  EXPECT_EQ(FormatError(Status::NotFound("no job j-1")), "error: no job j-1");
}

TEST(TrailingArgsTest, SplitsOnlyForSubmit) {
  std::vector<std::string> args = {"submit", "--gpus", "2", "--", "python", "-u", "--", "x"};
  EXPECT_EQ(SplitTrailingArgs(&args, {"submit"}),
            (std::vector<std::string>{"python", "-u", "--", "x"}));
  EXPECT_EQ(args, (std::vector<std::string>{"submit", "--gpus", "2"}));

  std::vector<std::string> other = {"logs", "--", "j-1"};
  EXPECT_TRUE(SplitTrailingArgs(&other, {"submit"}).empty());
  EXPECT_EQ(other.size(), 3u);

  std::vector<std::string> none = {"submit", "job.yaml"};
  EXPECT_TRUE(SplitTrailingArgs(&none, {"submit"}).empty());
  EXPECT_EQ(none.size(), 2u);
}

TEST(ConnectionTest, FromEnvironment) {
  unsetenv("TIDE_ADMIN_TOKEN");
  setenv("TIDE_SERVER", "gpu.example:7460/", 1);
  setenv("TIDE_TOKEN", "tide_u_x", 1);
  Connection c = ConnectionFromEnv(false);
  EXPECT_EQ(c.server, "http://gpu.example:7460");
  EXPECT_EQ(c.token, "tide_u_x");
  setenv("TIDE_ADMIN_TOKEN", "tide_a_y", 1);
  EXPECT_EQ(ConnectionFromEnv(true).token, "tide_a_y");
  EXPECT_EQ(ConnectionFromEnv(false).token, "tide_u_x");
  unsetenv("TIDE_SERVER");
  unsetenv("TIDE_TOKEN");
  unsetenv("TIDE_ADMIN_TOKEN");
  EXPECT_EQ(ConnectionFromEnv(false).server, kDefaultServer);
}

TEST(ConnectionTest, AdminCommandsBesideTideDevTakeItsAdminTokenOverAUsersToken) {
  char tmpl[] = "/tmp/tide-conn-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string cwd = std::filesystem::current_path();
  std::filesystem::current_path(tmpl);
  unsetenv("TIDE_ADMIN_TOKEN");
  setenv("TIDE_TOKEN", "tide_u_alice", 1);
  EXPECT_EQ(ConnectionFromEnv(true).token, "tide_u_alice") << "no dev admin token here";
  std::filesystem::create_directories(".tide/server");
  std::ofstream(".tide/server/admin.token") << "tide_a_dev\n";
  EXPECT_EQ(ConnectionFromEnv(true).token, "tide_a_dev");
  EXPECT_EQ(ConnectionFromEnv(false).token, "tide_u_alice");
  setenv("TIDE_TOKEN", "tide_a_given", 1);
  EXPECT_EQ(ConnectionFromEnv(true).token, "tide_a_given") << "an admin TIDE_TOKEN is used as given";
  unsetenv("TIDE_TOKEN");
  std::filesystem::current_path(cwd);
  std::filesystem::remove_all(tmpl);
}

// Runs `args` through a fresh app; returns the exit code.
int RunTide(std::vector<std::string> args) {
  CLI::App app{"test", "tide"};
  app.require_subcommand(1);
  AddUserCommands(app);
  std::vector<char*> argv;
  std::string name = "tide";
  argv.push_back(name.data());
  for (auto& a : args) argv.push_back(a.data());
  return RunCli(app, static_cast<int>(argv.size()), argv.data());
}

TEST(RunCliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(RunTide({}), kExitUsage);
  EXPECT_EQ(RunTide({"frobnicate"}), kExitUsage);
  EXPECT_EQ(RunTide({"status"}), kExitUsage);                      // missing ID
  EXPECT_EQ(RunTide({"ls", "--status", "sleeping"}), kExitUsage);  // not a status
  EXPECT_EQ(RunTide({"ls", "-o", "yaml"}), kExitUsage);
  EXPECT_EQ(RunTide({"logs", "j-1", "-f", "--attempt", "2"}), kExitUsage);
  EXPECT_EQ(RunTide({"submit"}), kExitUsage);  // nothing to run
  EXPECT_EQ(RunTide({"admin"}), kExitUsage);
  EXPECT_EQ(RunTide({"--help"}), kExitOk);
  EXPECT_EQ(RunTide({"submit", "--help"}), kExitOk);
}

TEST(RunCliTest, UnreachableServerIsAnError) {
  setenv("TIDE_SERVER", "http://127.0.0.1:1", 1);
  EXPECT_EQ(RunTide({"ls"}), kExitError);
  EXPECT_EQ(RunTide({"status", "j-1", "-o", "json"}), kExitError);
  unsetenv("TIDE_SERVER");
}

}  // namespace
}  // namespace tide::cli

namespace tide::cli {
namespace {

TEST(CsvTest, FieldsAreQuotedOnlyWhenTheyMustBe) {
  EXPECT_EQ(CsvField("plain"), "plain");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(JsonText(json("x")), "x");
  EXPECT_EQ(JsonText(json(nullptr)), "");
  EXPECT_EQ(JsonText(json(0.5)), "0.5");
}

}  // namespace
}  // namespace tide::cli
