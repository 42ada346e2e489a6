#include "cli/batch.h"

#include <gtest/gtest.h>

#include "api/batch.h"

namespace tide::cli {
namespace {

using nlohmann::json;

// The seed's batch file: trials and limits, no template.
json Seed() {
  return json::parse(R"({"experiment_batch": "exp-1", "max_concurrent": 2, "retry_times": 1,
    "jobs": [{"id": "run-001", "learning_rate": 2e-5, "batch_size": 8},
             {"id": "run-002", "learning_rate": 5e-5, "batch_size": 16}]})");
}

TEST(BatchTemplateTest, TheCommandLineSaysWhatEveryTrialRuns) {
  json batch = Seed();
  SubmitFlags f;
  f.gpus = 1;
  f.gpu_type = "RTX4090";
  f.command = {"python3", "train.py", "--lr", "{learning_rate}", "--bs", "{batch_size}"};
  ASSERT_TRUE(MergeBatchTemplate(nullptr, f, &batch).ok());
  auto spec = api::BatchSpecFromJson(batch);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->trials.size(), 2u);
  auto job = api::TrialJobSpec(*spec, spec->trials[1]);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->command,
            (std::vector<std::string>{"python3", "train.py", "--lr", "5e-05", "--bs", "16"}));
  EXPECT_EQ(job->resources.gpu_count, 1);
  EXPECT_EQ(job->retry_times, 1);
}

TEST(BatchTemplateTest, ATemplateFileAndFlagsOverIt) {
  json batch = Seed();
  json tmpl = json::parse(R"({"command": "python3 train.py --lr {learning_rate}",
                              "resources": {"gpu_count": 1}, "max_runtime": "1h"})");
  SubmitFlags f;
  f.gpus = 2;
  ASSERT_TRUE(MergeBatchTemplate(&tmpl, f, &batch).ok());
  EXPECT_EQ(batch["template"]["resources"]["gpu_count"], 2);
  EXPECT_EQ(batch["template"]["max_runtime"], "1h");
  EXPECT_TRUE(api::BatchSpecFromJson(batch).ok());
}

TEST(BatchTemplateTest, AFileWithATemplateIsUnchangedWithoutFlags) {
  json batch = Seed();
  batch["template"] = {{"command", "echo {learning_rate}"}};
  json before = batch;
  ASSERT_TRUE(MergeBatchTemplate(nullptr, SubmitFlags{}, &batch).ok());
  EXPECT_EQ(batch, before);
}

TEST(BatchTemplateTest, NothingToRunOrTwoTemplatesAreRefusedNamingTheTemplate) {
  json batch = Seed();
  Status st = MergeBatchTemplate(nullptr, SubmitFlags{}, &batch);
  EXPECT_EQ(st.field(), "template");
  EXPECT_NE(st.message().find("--template"), std::string::npos) << st.message();
  EXPECT_FALSE(batch.contains("template")) << "nothing half-written";
  // Flags without a command say nothing of what to run either.
  SubmitFlags gpus;
  gpus.gpus = 2;
  EXPECT_EQ(MergeBatchTemplate(nullptr, gpus, &batch).field(), "template");

  json with = Seed();
  with["template"] = {{"command", "true"}};
  json other = {{"command", "false"}};
  EXPECT_EQ(MergeBatchTemplate(&other, SubmitFlags{}, &with).field(), "template");

  json odd = Seed();
  odd["template"] = "python3 train.py";
  EXPECT_EQ(MergeBatchTemplate(nullptr, SubmitFlags{}, &odd).field(), "template");

  SubmitFlags bad;
  bad.constraints = {"nokey"};
  bad.command = {"true"};
  json b = Seed();
  EXPECT_EQ(MergeBatchTemplate(nullptr, bad, &b).field(), "template.constraints");
}

TEST(BatchResultsHeaderTest, AParameterAndAMetricOfOneNameAreToldApart) {
  EXPECT_EQ(BatchResultsHeader({"lr"}, {"loss", "step"}),
            (std::vector<std::string>{"trial", "lr", "status", "attempts", "cost", "loss", "step"}));
  EXPECT_EQ(BatchResultsHeader({"lr", "bs"}, {"lr", "loss"}),
            (std::vector<std::string>{"trial", "bs", "param.lr", "status", "attempts", "cost",
                                      "loss", "metric.lr"}));
  EXPECT_EQ(BatchResultsHeader({"status"}, {"cost"}),
            (std::vector<std::string>{"trial", "param.status", "status", "attempts", "cost",
                                      "metric.cost"}));
}

}  // namespace
}  // namespace tide::cli
