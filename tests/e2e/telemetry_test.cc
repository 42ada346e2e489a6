// Telemetry a user can see: GPU utilisation, memory and temperature from
// the agents' heartbeats in `tide status`, GET /v1/jobs/{id}/telemetry,
// /metrics, `tide nodes` and `tide top`, and the low-utilisation flag for a
// job that holds GPUs without using them (fake GPUs: a job's
// TIDE_FAKE_GPU_UTILIZATION sets what its GPUs read).
#include <gtest/gtest.h>

#include <regex>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

using nlohmann::json;

class TelemetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A short idle window, so the flag shows within seconds.
    cluster_.StartServer({"--low-utilization-window", "3s"});
    cluster_.StartAgent("gpubox", "2xRTX4090:24GB");
    cluster_.StartAgent("spare", "1xA100:80GB");
    token_ = cluster_.NewUser("alice");
    client_ = cluster_.ClientFor(token_);
  }

  std::string SubmitSleeper(const std::string& name, const json& env) {
    json spec = {{"name", name},
                 {"image", "host"},
                 {"command", {"sh", "-c", "sleep 60"}},
                 {"resources", {{"gpu_type", "RTX4090"}, {"gpu_count", 1}}}};
    if (!env.empty()) spec["env"] = env;
    return SubmitOk(*client_, spec);
  }

  Cluster cluster_;
  std::string token_;
  std::unique_ptr<api::Client> client_;
};

TEST_F(TelemetryTest, BusyAndIdleJobsShowTheirGpus) {
  std::string busy = SubmitSleeper("busy", json::object());
  std::string idle = SubmitSleeper("idle", {{"TIDE_FAKE_GPU_UTILIZATION", "0"}});
  ASSERT_FALSE(busy.empty());
  ASSERT_FALSE(idle.empty());

  // The busy job's GPU reads 90%, and its history fills.
  ASSERT_TRUE(Eventually([&] {
    auto t = client_->GetJobTelemetry(busy);
    return t.ok() && t->readings >= 3 && !t->gpus.empty() && t->gpus[0].now.utilization_pct == 90;
  })) << "no telemetry for the busy job";
  auto t = client_->Call("GET", "/v1/jobs/" + busy + "/telemetry");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)["job"], busy);
  EXPECT_EQ((*t)["status"], "running");
  ASSERT_EQ((*t)["gpus"].size(), 1u);
  const json& gpu = (*t)["gpus"][0];
  EXPECT_EQ(gpu["node"], "gpubox");
  EXPECT_EQ(gpu["model"], "RTX4090");
  EXPECT_GE(gpu["recent"].size(), 3u);
  EXPECT_EQ(gpu["recent"].back()["utilization_pct"], 90);
  EXPECT_GT(gpu["recent"].back()["memory_used_mb"].get<int64_t>(), 0);
  EXPECT_FALSE(gpu["tiers"].empty());
  EXPECT_DOUBLE_EQ((*t)["average"]["utilization_pct"].get<double>(), 90.0);
  EXPECT_FALSE((*t)["low_utilization"].get<bool>());
  // Without series: the averages only.
  auto brief = client_->Call("GET", "/v1/jobs/" + busy + "/telemetry?series=false");
  ASSERT_TRUE(brief.ok());
  EXPECT_TRUE((*brief)["gpus"][0]["recent"].empty());

  // The idle job is flagged once the whole window was idle.
  ASSERT_TRUE(Eventually([&] {
    auto ti = client_->GetJobTelemetry(idle, false);
    return ti.ok() && ti->low_utilization;
  })) << "the idle job was never flagged";

  CliResult status = cluster_.Cli({"status", busy}, token_);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(std::regex_search(status.out, std::regex("GPU util +90% now, 90% average over the run")))
      << status.out;
  EXPECT_NE(status.out.find("GPU memory"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("gpubox:"), std::string::npos) << "the per-GPU table\n" << status.out;
  EXPECT_EQ(status.out.find("low GPU utilisation"), std::string::npos) << status.out;
  CliResult idle_status = cluster_.Cli({"status", idle}, token_);
  ASSERT_EQ(idle_status.exit_code, 0) << idle_status.err;
  EXPECT_NE(idle_status.out.find("low GPU utilisation"), std::string::npos) << idle_status.out;
  EXPECT_NE(idle_status.out.find("0% now"), std::string::npos) << idle_status.out;

  // /metrics: one series per GPU, labelled by node, index and model.
  auto metrics = cluster_.admin().CallRaw("GET", "/metrics", "", "");
  ASSERT_TRUE(metrics.ok()) << metrics.status().ToString();
  EXPECT_NE(metrics->find("# TYPE tide_gpu_utilization_ratio gauge"), std::string::npos);
  EXPECT_TRUE(std::regex_search(
      *metrics, std::regex("tide_gpu_utilization_ratio\\{node=\"gpubox\",gpu=\"[01]\",model=\"RTX4090\"\\} 0.90")))
      << *metrics;
  EXPECT_NE(metrics->find("tide_gpu_utilization_ratio{node=\"spare\",gpu=\"0\",model=\"A100\"} 0.00"),
            std::string::npos)
      << *metrics;
  EXPECT_NE(metrics->find("tide_gpu_memory_used_bytes{node=\"gpubox\""), std::string::npos);
  EXPECT_NE(metrics->find("tide_gpu_temperature_celsius{node=\"gpubox\""), std::string::npos);

  // tide nodes: telemetry columns, and a draining node says so.
  CliResult nodes = cluster_.Cli({"nodes"}, token_);
  ASSERT_EQ(nodes.exit_code, 0) << nodes.err;
  EXPECT_TRUE(std::regex_search(nodes.out, std::regex("UTIL +MEM +TEMP"))) << nodes.out;
  EXPECT_TRUE(std::regex_search(nodes.out, std::regex("gpubox .* 45% +\\S+ GiB +72C")))
      << "gpubox: one GPU at 90%, one held idle\n" << nodes.out;
  CliResult drain = cluster_.Cli({"admin", "node", "drain", "spare"}, cluster_.admin_token());
  ASSERT_EQ(drain.exit_code, 0) << drain.err;
  nodes = cluster_.Cli({"nodes"}, token_);
  EXPECT_TRUE(std::regex_search(nodes.out, std::regex("spare +\\S+ +draining"))) << nodes.out;
  EXPECT_TRUE(std::regex_search(nodes.out, std::regex("gpubox +\\S+ +ready"))) << nodes.out;

  // tide top --once: one frame with both jobs and both nodes.
  CliResult top = cluster_.Cli({"top", "--once"}, token_);
  ASSERT_EQ(top.exit_code, 0) << top.err;
  EXPECT_NE(top.out.find(busy), std::string::npos) << top.out;
  EXPECT_NE(top.out.find(idle), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("low GPU utilisation"), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("NODES (2)"), std::string::npos) << top.out;
  EXPECT_TRUE(std::regex_search(top.out, std::regex("spare +draining"))) << top.out;

  for (const std::string& id : {busy, idle}) ASSERT_TRUE(client_->CancelJob(id).ok());
  WaitTerminal(*client_, busy);
  WaitTerminal(*client_, idle);
  // An ended job keeps its telemetry, and is no longer flagged.
  auto after = client_->GetJobTelemetry(idle, false);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_GT(after->readings, 0);
  EXPECT_FALSE(after->low_utilization);
}

TEST_F(TelemetryTest, BadInput) {
  auto unknown = client_->Call("GET", "/v1/jobs/j-nosuchjob/telemetry");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), Code::kNotFound);
  EXPECT_NE(unknown.status().message().find("j-nosuchjob"), std::string::npos)
      << unknown.status().message();
  // Another user's job is as unknown as one that never was.
  std::string id = SubmitOk(*client_, {{"name", "mine"},
                                       {"image", "host"},
                                       {"command", {"true"}},
                                       {"resources", {{"gpu_count", 1}}}});
  auto bob = cluster_.ClientFor(cluster_.NewUser("bob"));
  auto theirs = bob->GetJobTelemetry(id);
  ASSERT_FALSE(theirs.ok());
  EXPECT_EQ(theirs.status().code(), Code::kNotFound);
  auto bad_query = client_->Call("GET", "/v1/jobs/" + id + "/telemetry?series=maybe");
  ASSERT_FALSE(bad_query.ok());
  EXPECT_EQ(bad_query.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad_query.status().field(), "series");

  CliResult cli = cluster_.Cli({"top", "--bogus"}, token_);
  EXPECT_EQ(cli.exit_code, 2) << cli.out << cli.err;
  cli = cluster_.Cli({"top", "--once", "--interval", "0"}, token_);
  EXPECT_EQ(cli.exit_code, 2) << cli.out << cli.err;
  EXPECT_NE(cli.err.find("--interval"), std::string::npos) << cli.err;
  cli = cluster_.Cli({"top", "--once", "--limit", "0"}, token_);
  EXPECT_EQ(cli.exit_code, 2) << cli.out << cli.err;
  WaitTerminal(*client_, id);
}

}  // namespace
}  // namespace tide::e2e
