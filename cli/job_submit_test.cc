#include "cli/job_submit.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace tide::cli {
namespace {

using nlohmann::json;

TEST(EnvAssignmentTest, Parses) {
  auto kv = ParseEnvAssignment("LR=3e-4");
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(kv->first, "LR");
  EXPECT_EQ(kv->second, "3e-4");
  EXPECT_EQ(ParseEnvAssignment("EMPTY=")->second, "");
  EXPECT_EQ(ParseEnvAssignment("A=b=c")->second, "b=c");
}

TEST(EnvAssignmentTest, CopiesFromEnvironment) {
  setenv("TIDE_TEST_COPY", "42", 1);
  EXPECT_EQ(ParseEnvAssignment("TIDE_TEST_COPY")->second, "42");
  unsetenv("TIDE_TEST_COPY");
  EXPECT_FALSE(ParseEnvAssignment("TIDE_TEST_COPY").ok());
}

TEST(EnvAssignmentTest, RejectsBadNames) {
  EXPECT_FALSE(ParseEnvAssignment("=x").ok());
  EXPECT_FALSE(ParseEnvAssignment("1A=x").ok());
  EXPECT_FALSE(ParseEnvAssignment("A-B=x").ok());
}

TEST(MergeTest, FlagsOnly) {
  SubmitFlags f;
  f.name = "train";
  f.gpus = 2;
  f.gpu_type = "RTX4090";
  f.gpu_memory = "24GB";
  f.max_runtime = "2h";
  f.env = {"LR=0.1"};
  f.tags = {"sweep"};
  f.command = {"python", "train.py"};
  json spec = json::object();
  std::vector<std::string> set;
  ASSERT_TRUE(MergeSubmitFlags(f, &spec, &set).ok());
  EXPECT_EQ(spec, json::parse(R"({
    "name": "train", "max_runtime": "2h", "command": ["python", "train.py"],
    "resources": {"gpu_count": 2, "gpu_type": "RTX4090", "gpu_memory": "24GB"},
    "env": {"LR": "0.1"}, "tags": ["sweep"]})"));
  EXPECT_EQ(set, (std::vector<std::string>{"name", "max_runtime", "command", "resources.gpu_count",
                                           "resources.gpu_type", "resources.gpu_memory", "env.LR",
                                           "tags[0]"}));
}

TEST(MergeTest, NodesMakeAGang) {
  SubmitFlags f;
  f.gpus = 8;
  f.nodes = 4;
  json spec = json::object();
  std::vector<std::string> set;
  ASSERT_TRUE(MergeSubmitFlags(f, &spec, &set).ok());
  EXPECT_EQ(spec, json::parse(R"({"resources": {"gpu_count": 8, "nodes": 4}})"));
  EXPECT_EQ(set, (std::vector<std::string>{"resources.gpu_count", "resources.nodes"}));
}

TEST(MergeTest, FlagsOverrideTheFile) {
  json spec = json::parse(R"({
    "name": "base", "image": "pytorch", "command": "python train.py",
    "resources": {"gpu_count": 1, "cpus": 8},
    "env": {"LR": "0.1", "SEED": "1"}, "tags": ["a"]})");
  SubmitFlags f;
  f.name = "run-7";
  f.gpus = 4;
  f.gpu_type = "A100, H100";
  f.env = {"LR=0.3"};
  f.tags = {"a", "b"};
  ASSERT_TRUE(MergeSubmitFlags(f, &spec).ok());
  EXPECT_EQ(spec["name"], "run-7");
  EXPECT_EQ(spec["image"], "pytorch");
  EXPECT_EQ(spec["command"], "python train.py");
  EXPECT_EQ(spec["resources"],
            json::parse(R"({"gpu_count": 4, "cpus": 8, "gpu_type": ["A100", "H100"]})"));
  EXPECT_EQ(spec["env"], json::parse(R"({"LR": "0.3", "SEED": "1"})"));
  EXPECT_EQ(spec["tags"], json::parse(R"(["a", "b"])"));
}

TEST(MergeTest, NothingGivenChangesNothing) {
  json spec = json::parse(R"({"command": ["true"], "resources": "odd"})");
  json before = spec;
  ASSERT_TRUE(MergeSubmitFlags(SubmitFlags{}, &spec).ok());
  EXPECT_EQ(spec, before);
}

TEST(MergeTest, ZeroGpusIsPassedOnForTheServerToRefuse) {
  SubmitFlags f;
  f.gpus = 0;
  json spec = json::object();
  ASSERT_TRUE(MergeSubmitFlags(f, &spec).ok());
  EXPECT_EQ(spec["resources"]["gpu_count"], 0);
}

TEST(MergeTest, WrongShapeNamesTheField) {
  json spec = json::parse(R"({"resources": [1, 2]})");
  SubmitFlags f;
  f.gpus = 2;
  Status st = MergeSubmitFlags(f, &spec);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.field(), "resources");

  json tags = json::parse(R"({"tags": "one"})");
  SubmitFlags t;
  t.tags = {"x"};
  EXPECT_EQ(MergeSubmitFlags(t, &tags).field(), "tags");

  SubmitFlags bad_env;
  bad_env.env = {"NO SPACES=1"};
  json empty = json::object();
  EXPECT_FALSE(MergeSubmitFlags(bad_env, &empty).ok());
}

}  // namespace
}  // namespace tide::cli
