#include "api/batch.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace tide::api {
namespace {

json J(const std::string& text) { return json::parse(text); }

// The issue's example batch, with `patch` merged over it.
json Example(const json& patch = json::object()) {
  json j = J(R"({"experiment_batch": "exp-20250601", "max_concurrent": 4, "retry_times": 2,
    "budget": 500,
    "template": {"command": "python3 train.py --lr {learning_rate} --bs {batch_size}",
                 "resources": {"gpu_count": 1, "gpu_type": "RTX4090"}, "max_runtime": "2h"},
    "jobs": [{"id": "run-001", "learning_rate": 2e-5, "batch_size": 8},
             {"id": "run-002", "learning_rate": 5e-5, "batch_size": 8}]})");
  j.merge_patch(patch);
  return j;
}

BatchSpec Parse(const json& j) {
  auto r = BatchSpecFromJson(j);
  EXPECT_TRUE(r.ok()) << j.dump() << ": " << r.status().ToString();
  return r.ok() ? *r : BatchSpec{};
}

void ExpectBad(const json& j, const std::string& field, const std::string& part = "") {
  auto r = BatchSpecFromJson(j);
  ASSERT_FALSE(r.ok()) << "accepted " << j.dump();
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().field(), field) << r.status().ToString();
  if (!part.empty()) {
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().ToString();
  }
}

TEST(BatchSpecTest, TheExampleExpandsIntoTwoTrialsWithTheirIdsAndParameters) {
  BatchSpec b = Parse(Example());
  EXPECT_EQ(b.name, "exp-20250601");
  EXPECT_EQ(b.max_concurrent, 4);
  EXPECT_EQ(b.retry_times, 2);
  EXPECT_EQ(b.budget, 500'000'000);
  ASSERT_EQ(b.trials.size(), 2u);
  EXPECT_EQ(b.trials[0].id, "run-001");
  EXPECT_EQ(b.trials[1].params["learning_rate"], 5e-5);

  auto spec = TrialJobSpec(b, b.trials[0]);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->command, (std::vector<std::string>{"/bin/sh", "-c",
                                                      "python3 train.py --lr 2e-05 --bs 8"}));
  EXPECT_EQ(spec->retry_times, 2);  // the batch's, as the template sets none
  EXPECT_EQ(spec->name, "exp-20250601/run-001");
  EXPECT_EQ(spec->max_runtime_s, 7200);
}

TEST(BatchSpecTest, AGridIsTheCartesianProductWithGeneratedIds) {
  BatchSpec b = Parse(Example({{"jobs", nullptr},
                               {"grid", {{"learning_rate", {1e-5, 3e-5, 1e-4}},
                                         {"batch_size", {8, 16}}}}}));
  ASSERT_EQ(b.trials.size(), 6u);
  std::set<std::string> combos, ids;
  for (const auto& t : b.trials) {
    combos.insert(ParamText(t.params["learning_rate"]) + "/" + ParamText(t.params["batch_size"]));
    ids.insert(t.id);
  }
  EXPECT_EQ(combos.size(), 6u);
  EXPECT_EQ(ids.size(), 6u);
  EXPECT_EQ(b.trials[0].id, "grid-1");
  EXPECT_EQ(b.trials[5].id, "grid-6");
}

TEST(BatchSpecTest, JobsAndGridTogetherGiveBoth) {
  BatchSpec b = Parse(Example({{"grid", {{"learning_rate", {1e-3}}, {"batch_size", {4, 32}}}}}));
  ASSERT_EQ(b.trials.size(), 4u);
  EXPECT_EQ(b.trials[0].id, "run-001");
  EXPECT_EQ(b.trials[3].id, "grid-2");
}

TEST(BatchSpecTest, AWholeStringPlaceholderKeepsTheParametersType) {
  BatchSpec b = Parse(J(R"({"template": {"command": ["python3", "t.py", "--seed={seed}"],
      "resources": {"gpu_count": "{gpus}"}, "env": {"RUN": "{seed}", "HOME_DIR": "${HOME}"}},
      "jobs": [{"seed": 7, "gpus": 2}]})"));
  auto spec = TrialJobSpec(b, b.trials[0]);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->resources.gpu_count, 2);
  EXPECT_EQ(spec->command[2], "--seed=7");
  EXPECT_EQ(spec->env.at("RUN"), "7");
  EXPECT_EQ(spec->env.at("HOME_DIR"), "${HOME}");  // the shell's, not a parameter
  EXPECT_EQ(b.trials[0].id, "trial-1");
}

TEST(BatchSpecTest, SecretsReachEveryTrialAsWritten) {
  BatchSpec b = Parse(J(R"({"template": {"command": "echo {x}",
      "secrets": {"CREDS": "{\"key\": \"{x}{{y}}\"}"}}, "jobs": [{"x": "a"}, {"x": "b"}]})"));
  for (const auto& trial : b.trials) {
    auto spec = TrialJobSpec(b, trial);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    EXPECT_EQ(spec->secrets.at("CREDS"), R"({"key": "{x}{{y}}"})") << "not a template";
  }
}

TEST(BatchSpecTest, BracesAreWrittenDoubled) {
  BatchSpec b = Parse(J(R"({"template": {"command": "echo {{x}} {x}"}, "jobs": [{"x": "a"}]})"));
  auto spec = TrialJobSpec(b, b.trials[0]);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->command[2], "echo {x} a");
}

TEST(BatchSpecTest, BadFilesAreRefusedNamingTheField) {
  ExpectBad(Example({{"max_concurrent", 0}}), "max_concurrent");
  ExpectBad(Example({{"retry_times", -1}}), "retry_times");
  ExpectBad(Example({{"budget", -5}}), "budget");
  ExpectBad(Example({{"bogus", 1}}), "bogus", "unknown");
  ExpectBad(Example({{"template", nullptr}}), "template", "required");
  ExpectBad(Example({{"jobs", "run-001"}}), "jobs");
  ExpectBad(Example({{"jobs", nullptr}}), "jobs", "needs trials");
  ExpectBad(Example({{"jobs", J(R"([{"id": "a b"}])")}}), "jobs[0].id");
  ExpectBad(Example({{"jobs", J(R"([{"id": "x", "learning_rate": 1, "batch_size": 1},
                                    {"id": "x", "learning_rate": 1, "batch_size": 1}])")}}),
            "jobs[1].id", "twice");
  ExpectBad(Example({{"jobs", J(R"([{"learning_rate": [1, 2], "batch_size": 1}])")}}),
            "jobs[0].learning_rate");
  ExpectBad(Example({{"grid", {{"lr", json::array()}}}}), "grid.lr");
  ExpectBad(Example({{"grid", {{"9lives", {1}}}}}), "grid.9lives");
  // A parameter the trial does not have.
  ExpectBad(Example({{"jobs", J(R"([{"id": "r1", "learning_rate": 1}])")}}), "template.command",
            "{batch_size}");
  // A trial whose substituted spec is invalid refuses the whole batch.
  ExpectBad(J(R"({"template": {"command": "x", "resources": {"gpu_count": "{g}"}},
                 "jobs": [{"g": 1}, {"id": "bad", "g": 0}]})"),
            "template.resources.gpu_count", "trial bad");
}

TEST(BatchSpecTest, TooLargeGridsAreRefusedBeforeExpanding) {
  json grid = json::object();
  for (const char* k : {"a", "b", "c", "d", "e"}) grid[k] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  ExpectBad(Example({{"jobs", nullptr}, {"grid", grid}}), "grid", "more than");
}

TEST(BatchSpecTest, TenThousandTrialsParse) {
  json grid = {{"learning_rate", json::array()}, {"batch_size", json::array()}};
  for (int i = 0; i < 100; ++i) grid["learning_rate"].push_back(1e-5 * (i + 1));
  for (int i = 0; i < 100; ++i) grid["batch_size"].push_back(i + 1);
  BatchSpec b = Parse(Example({{"jobs", nullptr}, {"grid", grid}}));
  EXPECT_EQ(b.trials.size(), 10'000u);
  EXPECT_EQ(b.trials.front().id, "grid-00001");
}

TEST(BatchRecordTest, RoundTrips) {
  Batch b;
  b.id = "b-1";
  b.owner = "u-1";
  b.name = "exp";
  b.max_concurrent = 3;
  b.retry_times = 1;
  b.budget = 1'234'567;
  b.trials = 9;
  b.created_at = 42;
  b.cancel_requested = true;
  b.job_template = {{"command", "x"}};
  auto back = BatchFromJson(ToJson(b));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->budget, 1'234'567);
  EXPECT_EQ(back->max_concurrent, 3);
  EXPECT_EQ(back->trials, 9);
  EXPECT_TRUE(back->cancel_requested);
  EXPECT_EQ(back->job_template, b.job_template);
}

TEST(BatchSpecTest, ToJsonReadsBackAsTheSameBatch) {
  auto spec = BatchSpecFromJson({{"experiment_batch", "sweep"},
                                 {"max_concurrent", 2},
                                 {"retry_times", 1},
                                 {"budget", 12.5},
                                 {"template", {{"command", "train --lr {lr}"}}},
                                 {"jobs", {{{"id", "a"}, {"lr", 0.1}}}},
                                 {"grid", {{"lr", {0.01, 0.001}}}}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto back = BatchSpecFromJson(ToJson(*spec));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->name, "sweep");
  EXPECT_EQ(back->max_concurrent, 2);
  EXPECT_EQ(back->retry_times, 1);
  EXPECT_EQ(back->budget, 12'500'000);
  EXPECT_EQ(back->job_template, spec->job_template);
  ASSERT_EQ(back->trials.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back->trials[i].id, spec->trials[i].id);
    EXPECT_EQ(back->trials[i].params, spec->trials[i].params);
  }
}

}  // namespace
}  // namespace tide::api
