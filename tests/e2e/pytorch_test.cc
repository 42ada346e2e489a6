// The PyTorch example (examples/pytorch-classifier, Debian's python3-torch
// on the CPU) through the real server, agents and CLI: to completion, a
// spot run preempted halfway that resumes on the other agent, and a sweep
// with a trial that fails once.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

using nlohmann::json;

const std::string kExample = std::string(TIDE_SOURCE_DIR) + "/examples/pytorch-classifier";

// The per-epoch losses of every attempt, in order.
std::vector<std::pair<int, double>> Epochs(api::Client& client, const std::string& id) {
  std::vector<std::pair<int, double>> out;
  auto m = client.Call("GET", "/v1/jobs/" + id + "/metrics");
  if (!m.ok()) return out;
  for (const auto& p : (*m)["metrics"]) out.emplace_back(p["epoch"].get<int>(), p["loss"].get<double>());
  return out;
}

class PytorchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer();
    token_ = cluster_.NewUser("alice");
    client_ = cluster_.ClientFor(token_);
  }
  std::string Submit(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"submit", kExample + "/job.yaml", "--code", kExample, "-o", "json"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = cluster_.Cli(args, token_);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    json answer = json::parse(r.out, nullptr, false);
    std::string id = answer.is_object() ? answer.value("id", "") : "";
    EXPECT_EQ(id.rfind("j-", 0), 0u) << r.out << r.err;
    return id;
  }
  std::string Log(const std::string& id, int attempt = 0) {
    auto text = client_->GetLogs(id, attempt);
    return text.ok() ? *text : text.status().ToString();
  }
  Cluster cluster_;
  std::string token_;
  std::unique_ptr<api::Client> client_;
};

TEST_F(PytorchTest, TrainsToCompletionWithDownloadableModels) {
  cluster_.StartAgent("a", "1xRTX4090:24GB");
  std::string id = Submit({"--tier", "on-demand"});
  api::Job done = WaitTerminal(*client_, id, std::chrono::seconds(120));
  ASSERT_EQ(done.status, api::JobStatus::kCompleted) << done.reason << Log(id);
  std::string dir = cluster_.dir() + "/models";
  CliResult get = cluster_.Cli({"outputs", id, "--get", dir}, token_);
  ASSERT_EQ(get.exit_code, 0) << get.err;
  for (int e = 1; e <= 6; ++e) {
    std::ifstream f(dir + "/model-epoch" + std::to_string(e) + ".pt", std::ios::binary);
    EXPECT_TRUE(f.good()) << "epoch " << e;
    std::string head(2, '\0');
    f.read(head.data(), 2);
    EXPECT_EQ(head, "PK") << "a torch.save zip file";
  }
  json summary = json::parse(ReadAll(dir + "/summary.json"));
  EXPECT_EQ(summary["epochs"], 6);
  auto epochs = Epochs(*client_, id);
  ASSERT_EQ(epochs.size(), 6u);
  EXPECT_LT(epochs.back().second, epochs.front().second) << "it learns";
}

TEST_F(PytorchTest, APreemptedRunResumesFromItsCheckpointOnTheOtherAgent) {
  cluster_.StartAgent("a", "1xRTX4090:24GB");
  std::string id = Submit({"--retry-times", "1"});  // spot
  ASSERT_TRUE(Eventually([&] { return Epochs(*client_, id).size() >= 2; }, std::chrono::seconds(90)));
  // On-demand work for the only GPU preempts it; it resumes on b.
  std::string blocker = SubmitOk(*client_, {{"command", "sleep 120"}, {"grace", 0}});
  ASSERT_TRUE(Eventually([&] {
    return client_->GetJob(id)->status == api::JobStatus::kQueued;
  }, std::chrono::seconds(60)));
  cluster_.StartAgent("b", "1xRTX4090:24GB");
  api::Job done = WaitTerminal(*client_, id, std::chrono::seconds(120));
  ASSERT_EQ(done.status, api::JobStatus::kCompleted) << done.reason;
  ASSERT_EQ(done.attempts.size(), 2u);
  EXPECT_EQ(done.attempts[0].reason, "preempted");
  EXPECT_EQ(done.retries, 0) << "a preemption uses no retry";
  EXPECT_NE(done.attempts[1].node_id, done.attempts[0].node_id);
  // Exactly the configured epochs, each once, the loss going on from
  // where it was.
  auto epochs = Epochs(*client_, id);
  ASSERT_EQ(epochs.size(), 6u) << Log(id, 2);
  for (int e = 0; e < 6; ++e) EXPECT_EQ(epochs[e].first, e + 1);
  std::string log2 = Log(id, 2);
  EXPECT_NE(log2.find("resumed from epoch"), std::string::npos) << log2;
  EXPECT_NE(log2.find("preempted"), std::string::npos) << log2;
  EXPECT_LT(epochs.back().second, epochs.front().second);
  json summary = json::parse(*client_->GetOutput(id, "summary.json"));
  EXPECT_EQ(summary["losses"].size(), 6u);
  for (int e = 1; e <= 6; ++e) {
    EXPECT_TRUE(client_->GetOutput(id, "model-epoch" + std::to_string(e) + ".pt").ok()) << e;
  }
  ASSERT_TRUE(client_->CancelJob(blocker).ok());
}

TEST_F(PytorchTest, ASweepWithAFlakyTrialReportsEveryFinalLoss) {
  cluster_.StartAgent("a", "2xRTX4090:24GB");
  CliResult r = cluster_.Cli({"batch", "submit", kExample + "/sweep.yaml", "--code", kExample, "-o", "json"},
                             token_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string batch = json::parse(r.out)["id"];
  ASSERT_TRUE(Eventually([&] {
    auto b = client_->Call("GET", "/v1/batches/" + batch);
    return b.ok() && (*b)["status"] != "running" && (*b)["status"] != "queued";
  }, std::chrono::seconds(240)));
  CliResult results = cluster_.Cli({"batch", "results", batch, "-o", "json"}, token_);
  ASSERT_EQ(results.exit_code, 0) << results.err;
  json rows = json::parse(results.out);
  ASSERT_EQ(rows.size(), 6u);
  for (const auto& row : rows) {
    EXPECT_EQ(row["status"], "completed") << row.dump();
    EXPECT_TRUE(row["metrics"]["loss"].is_number()) << row.dump();
    EXPECT_EQ(row["metrics"]["epoch"], 3) << row.dump();
  }
  EXPECT_EQ(rows[0]["id"], "flaky");
  EXPECT_EQ(rows[0]["attempts"], 2);
  EXPECT_EQ(rows[0]["retries"], 1);
  // At most two at once.
  auto page = client_->Call("GET", "/v1/jobs?batch=" + batch);
  std::vector<std::pair<int64_t, int>> events;
  for (const auto& j : (*page)["jobs"]) {
    for (const auto& a : j["attempts"]) {
      events.emplace_back(a["started_at"].get<int64_t>(), 1);
      events.emplace_back(a["finished_at"].get<int64_t>(), -1);
    }
  }
  std::sort(events.begin(), events.end());
  int running = 0, most = 0;
  for (auto& [at, d] : events) most = std::max(most, running += d);
  EXPECT_LE(most, 2);
  CliResult table = cluster_.Cli({"batch", "results", batch}, token_);
  EXPECT_NE(table.out.find("LOSS"), std::string::npos) << table.out;
}

}  // namespace
}  // namespace tide::e2e
