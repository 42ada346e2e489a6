// The first day of a new user, as the README tells it: curl's -d, join
// tokens for a provider, help by who uses it, estimates that say why, the
// submit flags of sbatch and sky launch, and the seed's own batch file.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

using nlohmann::json;

class FirstDayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer();
    cluster_.StartAgent("a1", "2xRTX4090:24GB", {"--label", "partition=gpu"});
    token_ = cluster_.NewUser("alice");
  }
  Cluster cluster_;
  std::string token_;
};

TEST_F(FirstDayTest, TheReadmesCurlExampleIsAccepted) {
  // curl -d sends application/x-www-form-urlencoded.
  std::string out = Shell(cluster_.curl() + " -H 'Authorization: Bearer " + token_ + "' " + cluster_.url() +
                          "/v1/jobs -d '{\"name\":\"hi\",\"image\":\"host\",\"command\":[\"true\"],"
                          "\"resources\":{\"gpu_type\":\"RTX4090\",\"gpu_count\":1}}'");
  json answer = json::parse(out, nullptr, false);
  ASSERT_TRUE(answer.is_object()) << out;
  EXPECT_EQ(answer.value("name", ""), "hi") << out;
  // A body that is not JSON is still refused, and says how it came.
  std::string bad = Shell(cluster_.curl() + " -H 'Authorization: Bearer " + token_ + "' " + cluster_.url() +
                          "/v1/jobs -d 'name=hi'");
  EXPECT_NE(bad.find("must be JSON"), std::string::npos) << bad;
  EXPECT_NE(bad.find("x-www-form-urlencoded"), std::string::npos) << bad;
}

TEST_F(FirstDayTest, AJoinTokenForANewProviderIsReadyToPaste) {
  CliResult join = cluster_.Cli({"admin", "join-token", "--provider", "bob"}, cluster_.admin_token());
  ASSERT_EQ(join.exit_code, 0) << join.err;
  std::string token = join.out.substr(0, join.out.find('\n'));
  EXPECT_EQ(token.rfind("tide_j_", 0), 0u) << join.out;
  EXPECT_NE(join.err.find("Join token jt-"), std::string::npos) << join.err;
  EXPECT_NE(join.err.find("--join-token " + token), std::string::npos) << join.err;
  EXPECT_NE(join.err.find("Created provider account bob"), std::string::npos) << join.err;
  // Bob exists now: a second token does not create him again.
  CliResult again = cluster_.Cli({"admin", "join-token", "--provider", "bob", "-o", "json"},
                                 cluster_.admin_token());
  ASSERT_EQ(again.exit_code, 0) << again.err;
  json j = json::parse(again.out);
  EXPECT_FALSE(j.contains("provider_token"));
  EXPECT_EQ(j["id"].get<std::string>().rfind("jt-", 0), 0u);
  // An agent joins with the pasted token and is bob's.
  cluster_.StartAgent("bobs", "1xA100:80GB", {"--join-token", token});
  // Without create_provider, the API names the field.
  auto direct = cluster_.admin().Call("POST", "/v1/admin/join-tokens", json{{"provider", "carol"}});
  EXPECT_EQ(direct.status().field(), "provider");
}

TEST_F(FirstDayTest, HelpGroupsEveryCommandByWhoUsesIt) {
  CliResult help = cluster_.Cli({"--help"}, token_);
  ASSERT_EQ(help.exit_code, 0) << help.err;
  EXPECT_EQ(help.out.find("Subcommands:"), std::string::npos) << help.out;
  for (const char* heading : {"Run jobs (users)", "Credit, cost and tokens (users)", "Lend GPUs (providers)",
                              "Operate (operators"}) {
    EXPECT_NE(help.out.find(heading), std::string::npos) << heading;
  }
  EXPECT_NE(help.out.find("TIDE_ADMIN_TOKEN, else TIDE_TOKEN"), std::string::npos) << help.out;
}

TEST_F(FirstDayTest, TheCommandIsFoundPastTheValuesOfGlobalOptions) {
  // `tide` builds only the command a line names: the values of --pin and
  // --ca-file are no command even when they read like one.
  CliResult v = cluster_.Cli({"--pin", "ls", "--ca-file", "submit", "version"}, token_);
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.out.rfind("tide ", 0), 0u) << v.out << v.err;
  CliResult eq = cluster_.Cli({"--pin=ls", "version"}, token_);
  EXPECT_EQ(eq.exit_code, 0) << eq.err;
  // --version alone, which builds no command, says what `tide version` says.
  CliResult flag = cluster_.Cli({"--version"}, token_);
  EXPECT_EQ(flag.exit_code, 0) << flag.err;
  EXPECT_EQ(flag.out, v.out);
  // A word that names no command is named in the error, with the nearest.
  CliResult bad = cluster_.Cli({"--pin", "x", "sumbit", "--", "true"}, token_);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("\"sumbit\" is not a command; did you mean \"submit\"?"),
            std::string::npos) << bad.err;
  CliResult far = cluster_.Cli({"frobnicate"}, token_);
  EXPECT_EQ(far.exit_code, 2);
  EXPECT_NE(far.err.find("\"frobnicate\" is not a command\n"), std::string::npos) << far.err;
}

TEST_F(FirstDayTest, AnEstimateForAShapeNoNodeHoldsSaysWhy) {
  CliResult e = cluster_.Cli({"estimate", "--gpus", "1", "--gpu-type", "H100", "--hours", "1"}, token_);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.out.find("never as asked: no node has gpu_type=H100"), std::string::npos) << e.out;
}

TEST_F(FirstDayTest, SubmitTakesTheFlagsOfSbatchAndSkyLaunch) {
  CliResult first = cluster_.Cli({"submit", "-q", "--", "true"}, token_);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::string dep = first.out.substr(0, first.out.find('\n'));
  CliResult sub = cluster_.Cli({"submit", "-o", "json", "--priority", "5", "--constraint",
                                "partition=gpu", "--max-price", "2", "--max-cost", "3",
                                "--depends-on", dep, "--spot", "-e", "LR=0.1", "--", "sh", "-c",
                                "echo lr=$LR"},
                               token_);
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json job = json::parse(sub.out);
  EXPECT_EQ(job["priority"], 5);
  EXPECT_EQ(job["tier"], "spot");
  EXPECT_EQ(job["constraints"]["partition"], "gpu");
  EXPECT_EQ(job["max_price"], 2.0);
  EXPECT_EQ(job["max_cost"], 3.0);
  EXPECT_EQ(job["depends_on"][0]["job"], dep);
  CliResult wait = cluster_.Cli({"wait", job["id"]}, token_);
  EXPECT_EQ(wait.exit_code, 0) << wait.err;
  EXPECT_NE(cluster_.Cli({"logs", job["id"]}, token_).out.find("lr=0.1"), std::string::npos);
  CliResult bad = cluster_.Cli({"submit", "--constraint", "partition", "--", "true"}, token_);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--constraint \"partition\""), std::string::npos) << bad.err;
  CliResult bad_dep = cluster_.Cli({"submit", "--depends-on", "after:j-1", "--", "true"}, token_);
  EXPECT_NE(bad_dep.err.find("\"after\" cannot be honoured"), std::string::npos) << bad_dep.err;
}

TEST_F(FirstDayTest, TheSeedsBatchFileRunsOnceTheCommandLineSaysWhat) {
  std::string file = cluster_.dir() + "/seed.json";
  std::ofstream(file) << R"({"experiment_batch": "exp-1", "max_concurrent": 2, "retry_times": 1,
    "jobs": [{"id": "run-001", "learning_rate": 0.5, "batch_size": 8},
             {"id": "run-002", "learning_rate": 0.25, "batch_size": 16}]})";
  CliResult refused = cluster_.Cli({"batch", "submit", file}, token_);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("--template"), std::string::npos) << refused.err;
  CliResult sub = cluster_.Cli(
      {"batch", "submit", file, "-o", "json", "--gpus", "1", "--", "sh", "-c",
       "echo \"{\\\"learning_rate\\\": $0, \\\"loss\\\": $1}\" >> $TIDE_METRICS_FILE", "{learning_rate}",
       "{batch_size}"},
      token_);
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  std::string batch = json::parse(sub.out)["id"];
  ASSERT_TRUE(Eventually([&] {
    auto b = cluster_.ClientFor(token_)->Call("GET", "/v1/batches/" + batch);
    return b.ok() && (*b)["status"] == "completed";
  }, std::chrono::seconds(60)));
  CliResult csv = cluster_.Cli({"batch", "results", batch, "-o", "csv"}, token_);
  EXPECT_EQ(csv.out.rfind("trial,batch_size,param.learning_rate,status,attempts,cost,metric.learning_rate,loss\n", 0), 0u)
      << csv.out;
}

}  // namespace
}  // namespace tide::e2e
