#include "cli/job_submit.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "api/types.h"

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

TEST(MergeTest, SchedulingFlagsMakeASpecTheServerAccepts) {
  SubmitFlags f;
  f.priority = 50;
  f.constraints = {"partition=gpu", "zone=eu"};
  f.max_cost = 12.5;
  f.max_price = 0.4;
  f.depends_on = "j-1,afterany:j-2:j-3";
  f.spot = true;
  f.image = "pytorch";
  f.env = {"LR=0.1"};
  f.command = {"python3", "train.py"};
  json spec = json::object();
  ASSERT_TRUE(MergeSubmitFlags(f, &spec).ok());
  EXPECT_EQ(spec["tier"], "spot");
  EXPECT_EQ(spec["priority"], 50);
  EXPECT_EQ(spec["constraints"], json::parse(R"({"partition": "gpu", "zone": "eu"})"));
  EXPECT_EQ(spec["depends_on"], json::parse(R"([{"job": "j-1", "condition": "afterok"},
      {"job": "j-2", "condition": "afterany"}, {"job": "j-3", "condition": "afterany"}])"));
  auto typed = api::JobSpecFromJson(spec);
  ASSERT_TRUE(typed.ok()) << typed.status().message();
  EXPECT_EQ(typed->tier, "spot");
  EXPECT_EQ(typed->priority, 50);
  EXPECT_EQ(typed->constraints.at("partition"), "gpu");
  EXPECT_EQ(typed->max_cost, 12'500'000);
  EXPECT_EQ(typed->max_price, 400'000);
  ASSERT_EQ(typed->depends_on.size(), 3u);
  EXPECT_EQ(typed->image, "pytorch");
}

TEST(MergeTest, BadSchedulingFlagsNameTheFlag) {
  json spec = json::object();
  SubmitFlags c;
  c.constraints = {"partition"};
  Status st = MergeSubmitFlags(c, &spec);
  EXPECT_EQ(st.field(), "constraints");
  EXPECT_NE(st.message().find("--constraint \"partition\""), std::string::npos) << st.message();

  SubmitFlags d;
  d.depends_on = "after:j-1";
  st = MergeSubmitFlags(d, &spec);
  EXPECT_EQ(st.field(), "depends_on");
  EXPECT_NE(st.message().find("\"after\" cannot be honoured"), std::string::npos) << st.message();
  d.depends_on = "afterok:";
  EXPECT_EQ(MergeSubmitFlags(d, &spec).field(), "depends_on");

  SubmitFlags t;
  t.spot = true;
  t.tier = "on-demand";
  EXPECT_EQ(MergeSubmitFlags(t, &spec).field(), "tier");

  // Out of range values reach the server's validator, which names the field.
  SubmitFlags m;
  m.max_price = -1;
  m.command = {"true"};
  json priced = json::object();
  ASSERT_TRUE(MergeSubmitFlags(m, &priced).ok());
  EXPECT_EQ(api::JobSpecFromJson(priced).status().field(), "max_price");
}

}  // namespace
}  // namespace tide::cli
