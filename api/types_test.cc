#include "api/types.h"

#include <gtest/gtest.h>

#include <string>

namespace tide::api {
namespace {

json J(const std::string& text) { return json::parse(text); }

// A minimal valid spec with `patch` merged over it.
json Spec(const json& patch = json::object()) {
  json j = {{"command", {"python", "train.py"}}};
  j.merge_patch(patch);
  return j;
}

JobSpec Parse(const json& j) {
  auto r = JobSpecFromJson(j);
  EXPECT_TRUE(r.ok()) << j.dump() << ": " << r.status().ToString();
  return r.ok() ? *r : JobSpec{};
}

// The spec is refused, naming `field`.
void ExpectBad(const json& j, const std::string& field, const std::string& message_part = "") {
  auto r = JobSpecFromJson(j);
  ASSERT_FALSE(r.ok()) << "accepted " << j.dump();
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << j.dump();
  EXPECT_EQ(r.status().field(), field) << j.dump() << ": " << r.status().ToString();
  if (!message_part.empty()) {
    EXPECT_NE(r.status().message().find(message_part), std::string::npos)
        << j.dump() << ": " << r.status().message();
  }
}

TEST(JobSpecFromJson, GenericClientShape) {
  JobSpec s = Parse(J(R"({"name": "train", "image": "pytorch/pytorch:2.3",
                          "command": ["python", "train.py", "--lr", "3e-4"],
                          "resources": {"gpu_type": "RTX 4090", "gpu_count": 2}})"));
  EXPECT_EQ(s.name, "train");
  EXPECT_EQ(s.image, "pytorch/pytorch:2.3");
  EXPECT_EQ(s.command, (std::vector<std::string>{"python", "train.py", "--lr", "3e-4"}));
  EXPECT_EQ(s.resources.gpu_count, 2);
  EXPECT_EQ(s.resources.gpu_types, (std::vector<std::string>{"RTX4090"}));
}

TEST(JobSpecFromJson, Defaults) {
  JobSpec s = Parse(Spec());
  EXPECT_EQ(s.name, "");
  EXPECT_EQ(s.image, "host");
  EXPECT_TRUE(s.env.empty());
  EXPECT_EQ(s.resources.gpu_count, 1);
  EXPECT_TRUE(s.resources.gpu_types.empty());
  EXPECT_EQ(s.resources.gpu_memory_mb, 0);
  EXPECT_EQ(s.resources.cpus, 0);
  EXPECT_EQ(s.resources.memory_mb, 0);
  EXPECT_EQ(s.max_runtime_s, 0);
  EXPECT_EQ(s.grace_s, 30);
  EXPECT_EQ(s.code, "");
  EXPECT_TRUE(s.tags.empty());
  // Explicit nulls read as absent.
  json nulls = Spec();
  for (const char* key :
       {"name", "image", "env", "resources", "max_runtime", "grace", "code", "tags"}) {
    nulls[key] = nullptr;
  }
  JobSpec n = Parse(nulls);
  EXPECT_EQ(n.image, "host");
  EXPECT_EQ(n.resources.gpu_count, 1);
  EXPECT_EQ(n.grace_s, 30);
}

TEST(JobSpecFromJson, CommandStringRunsInShell) {
  JobSpec s = Parse(Spec({{"command", "python train.py && echo done"}}));
  EXPECT_EQ(s.command, (std::vector<std::string>{"/bin/sh", "-c", "python train.py && echo done"}));
}

TEST(JobSpecFromJson, GpuTypeStringListOrAny) {
  EXPECT_EQ(Parse(Spec({{"resources", {{"gpu_type", "A100"}}}})).resources.gpu_types,
            (std::vector<std::string>{"A100"}));
  EXPECT_EQ(
      Parse(Spec({{"resources", {{"gpu_type", {"NVIDIA A100-SXM4-80GB", "h100", "rtx 4090"}}}}}))
          .resources.gpu_types,
      (std::vector<std::string>{"A100", "H100", "RTX4090"}));
  EXPECT_TRUE(Parse(Spec({{"resources", {{"gpu_type", "any"}}}})).resources.gpu_types.empty());
  EXPECT_TRUE(Parse(Spec({{"resources", {{"gpu_type", "ANY"}}}})).resources.gpu_types.empty());
  EXPECT_TRUE(
      Parse(Spec({{"resources", {{"gpu_type", json::array()}}}})).resources.gpu_types.empty());
  ExpectBad(Spec({{"resources", {{"gpu_type", ""}}}}), "resources.gpu_type");
  ExpectBad(Spec({{"resources", {{"gpu_type", "--"}}}}), "resources.gpu_type");
  ExpectBad(Spec({{"resources", {{"gpu_type", 4090}}}}), "resources.gpu_type");
  ExpectBad(Spec({{"resources", {{"gpu_type", {"A100", 1}}}}}), "resources.gpu_type[1]");
}

TEST(JobSpecFromJson, MemoryAndResources) {
  JobSpec s =
      Parse(Spec({{"resources", {{"gpu_memory", "24GB"}, {"cpus", 8.5}, {"memory", "64G"}}}}));
  EXPECT_EQ(s.resources.gpu_memory_mb, 24576);
  EXPECT_EQ(s.resources.cpus, 8.5);
  EXPECT_EQ(s.resources.memory_mb, 65536);
  JobSpec m = Parse(Spec({{"resources", {{"gpu_memory", 40960}, {"memory", 512}}}}));
  EXPECT_EQ(m.resources.gpu_memory_mb, 40960);
  EXPECT_EQ(m.resources.memory_mb, 512);
  EXPECT_EQ(Parse(Spec({{"resources", {{"gpu_memory", 0}}}})).resources.gpu_memory_mb, 0);

  ExpectBad(Spec({{"resources", {{"gpu_memory", -1}}}}), "resources.gpu_memory", "negative");
  ExpectBad(Spec({{"resources", {{"gpu_memory", "-24GB"}}}}), "resources.gpu_memory");
  ExpectBad(Spec({{"resources", {{"gpu_memory", "24 parsecs"}}}}), "resources.gpu_memory");
  ExpectBad(Spec({{"resources", {{"gpu_memory", 1.5}}}}), "resources.gpu_memory");
  ExpectBad(Spec({{"resources", {{"memory", -512}}}}), "resources.memory");
  ExpectBad(Spec({{"resources", {{"memory", 0}}}}), "resources.memory");
  ExpectBad(Spec({{"resources", {{"memory", "lots"}}}}), "resources.memory");
  ExpectBad(Spec({{"resources", {{"cpus", 0}}}}), "resources.cpus");
  ExpectBad(Spec({{"resources", {{"cpus", -2}}}}), "resources.cpus");
  ExpectBad(Spec({{"resources", {{"cpus", "8"}}}}), "resources.cpus");
  ExpectBad(J(R"({"command": ["x"], "resources": {"memory": 18446744073709551615}})"),
            "resources.memory");
}

TEST(JobSpecFromJson, Durations) {
  EXPECT_EQ(Parse(Spec({{"max_runtime", "2h"}})).max_runtime_s, 7200);
  EXPECT_EQ(Parse(Spec({{"max_runtime", "1h30m"}})).max_runtime_s, 5400);
  EXPECT_EQ(Parse(Spec({{"max_runtime", 3600}})).max_runtime_s, 3600);
  EXPECT_EQ(Parse(Spec({{"max_runtime", "365d"}})).max_runtime_s, 365 * 86400);
  EXPECT_EQ(Parse(Spec({{"grace", "2m"}})).grace_s, 120);
  EXPECT_EQ(Parse(Spec({{"grace", 0}})).grace_s, 0);
  EXPECT_EQ(Parse(Spec({{"grace", "1h"}})).grace_s, 3600);

  ExpectBad(Spec({{"max_runtime", "5 fortnights"}}), "max_runtime", "unknown unit");
  ExpectBad(Spec({{"max_runtime", "1.5h"}}), "max_runtime");
  ExpectBad(Spec({{"max_runtime", 0}}), "max_runtime", "positive");
  ExpectBad(Spec({{"max_runtime", "0s"}}), "max_runtime", "positive");
  ExpectBad(Spec({{"max_runtime", -60}}), "max_runtime", "negative");
  ExpectBad(Spec({{"max_runtime", 1.5}}), "max_runtime");
  ExpectBad(Spec({{"max_runtime", true}}), "max_runtime");
  ExpectBad(Spec({{"max_runtime", "366d"}}), "max_runtime", "365d");
  ExpectBad(Spec({{"max_runtime", "9999999999999d"}}), "max_runtime");
  ExpectBad(J(R"({"command": ["x"], "max_runtime": 18446744073709551615})"), "max_runtime");
  ExpectBad(Spec({{"grace", "2h"}}), "grace", "1h");
  ExpectBad(Spec({{"grace", -1}}), "grace");
}

TEST(JobSpecFromJson, RejectsBadGpuCount) {
  ExpectBad(Spec({{"resources", {{"gpu_count", "two"}}}}), "resources.gpu_count",
            "must be an integer");
  ExpectBad(Spec({{"resources", {{"gpu_count", 1.5}}}}), "resources.gpu_count");
  ExpectBad(Spec({{"resources", {{"gpu_count", 0}}}}), "resources.gpu_count", "at least 1");
  ExpectBad(Spec({{"resources", {{"gpu_count", -1}}}}), "resources.gpu_count", "at least 1");
  ExpectBad(Spec({{"resources", {{"gpu_count", 65}}}}), "resources.gpu_count", "at most 64");
  ExpectBad(J(R"({"command": ["x"], "resources": {"gpu_count": 18446744073709551615}})"),
            "resources.gpu_count");
  ExpectBad(J(R"({"command": ["x"], "resources": {"gpu_count": 4294967297}})"),
            "resources.gpu_count");
  EXPECT_EQ(Parse(Spec({{"resources", {{"gpu_count", 64}}}})).resources.gpu_count, 64);
  EXPECT_EQ(Parse(Spec({{"resources", {{"gpu_count", 2.0}}}})).resources.gpu_count, 2);
}

TEST(JobSpecFromJson, GangNodesAndGpusPerNode) {
  JobSpec one = Parse(Spec());
  EXPECT_EQ(one.resources.nodes, 1);
  EXPECT_FALSE(ToJson(one)["resources"].contains("nodes"));
  JobSpec gang = Parse(Spec({{"resources", {{"nodes", 4}, {"gpus_per_node", 8}}}}));
  EXPECT_EQ(gang.resources.nodes, 4);
  EXPECT_EQ(gang.resources.gpu_count, 8);  // the same field
  EXPECT_EQ(Parse(ToJson(gang)).resources.nodes, 4);
  EXPECT_EQ(Parse(ToJson(gang)).resources.gpu_count, 8);
  EXPECT_EQ(Parse(Spec({{"resources", {{"nodes", 2}, {"gpu_count", 2}}}})).resources.gpu_count, 2);
  ExpectBad(Spec({{"resources", {{"nodes", 0}}}}), "resources.nodes", "at least 1");
  ExpectBad(Spec({{"resources", {{"nodes", 65}}}}), "resources.nodes", "at most 64");
  ExpectBad(Spec({{"resources", {{"nodes", "two"}}}}), "resources.nodes", "must be an integer");
  ExpectBad(Spec({{"resources", {{"gpus_per_node", 0}}}}), "resources.gpus_per_node", "at least 1");
  ExpectBad(Spec({{"resources", {{"gpu_count", 2}, {"gpus_per_node", 2}}}}),
            "resources.gpus_per_node", "one of them");
}

TEST(JobSpecFromJson, RejectsBadCommand) {
  ExpectBad(json::object(), "command", "required");
  ExpectBad(Spec({{"command", nullptr}}), "command", "required");
  ExpectBad(Spec({{"command", json::array()}}), "command", "empty");
  ExpectBad(Spec({{"command", ""}}), "command", "empty");
  ExpectBad(Spec({{"command", {""}}}), "command[0]");
  ExpectBad(Spec({{"command", {"python", 3}}}), "command[1]");
  ExpectBad(Spec({{"command", 42}}), "command");
  ExpectBad(Spec({{"command", {{"a", "b"}}}}), "command");
}

TEST(JobSpecFromJson, RejectsUnknownFields) {
  ExpectBad(Spec({{"gpus", 2}}), "gpus", "unknown field");
  ExpectBad(Spec({{"resources", {{"gpu_cont", 2}}}}), "resources.gpu_cont", "unknown field");
  ExpectBad(Spec({{"resources", "big"}}), "resources", "object");
  ExpectBad(json::array(), "body");
  ExpectBad(json("command"), "body");
}

TEST(JobSpecFromJson, RejectsBadScalars) {
  ExpectBad(Spec({{"name", 5}}), "name", "string");
  ExpectBad(Spec({{"name", std::string(129, 'n')}}), "name");
  EXPECT_EQ(Parse(Spec({{"name", std::string(128, 'n')}})).name.size(), 128u);
  ExpectBad(Spec({{"image", ""}}), "image");
  ExpectBad(Spec({{"image", {"a"}}}), "image");
  ExpectBad(Spec({{"tags", "solo"}}), "tags");
  ExpectBad(Spec({{"tags", {"ok", ""}}}), "tags[1]");
  ExpectBad(Spec({{"tags", {std::string(129, 't')}}}), "tags[0]");
  EXPECT_EQ(Parse(Spec({{"tags", {"sweep", "lr=3e-4"}}})).tags,
            (std::vector<std::string>{"sweep", "lr=3e-4"}));
}

TEST(JobSpecFromJson, ImageNames) {
  EXPECT_EQ(Parse(Spec()).image, "host");
  EXPECT_EQ(Parse(Spec({{"image", "pytorch-2.3"}})).image, "pytorch-2.3");
  EXPECT_EQ(Parse(Spec({{"image", "ghcr.io/org/train:v1@sha256"}})).image, "ghcr.io/org/train:v1@sha256");
  for (const std::string& bad : {std::string(".hidden"), std::string("-x"), std::string("/abs"),
                                 std::string("a b"), std::string("naïve"), std::string(201, 'i')}) {
    ExpectBad(Spec({{"image", bad}}), "image");
  }
}

TEST(JobSpecFromJson, NetworkOffByDefaultOnForGangsWhichNeedIt) {
  EXPECT_FALSE(Parse(Spec()).network);
  EXPECT_TRUE(Parse(Spec({{"network", true}})).network);
  json gang = Spec({{"resources", {{"nodes", 2}, {"gpus_per_node", 1}}}});
  EXPECT_TRUE(Parse(gang).network);
  json closed = gang;
  closed["network"] = false;
  ExpectBad(closed, "network", "needs the network");
  ExpectBad(Spec({{"network", "yes"}}), "network");
}

TEST(JobSpecFromJson, Env) {
  JobSpec s = Parse(Spec({{"env", {{"WANDB_MODE", "offline"}, {"_X1", ""}}}}));
  EXPECT_EQ(s.env.at("WANDB_MODE"), "offline");
  EXPECT_EQ(s.env.at("_X1"), "");
  ExpectBad(Spec({{"env", {{"1BAD", "x"}}}}), "env.1BAD", "environment variable");
  ExpectBad(Spec({{"env", {{"BAD-NAME", "x"}}}}), "env.BAD-NAME");
  ExpectBad(Spec({{"env", {{"A=B", "x"}}}}), "env.A=B");
  ExpectBad(Spec({{"env", {{"", "x"}}}}), "env.");
  ExpectBad(Spec({{"env", {{"EPOCHS", 10}}}}), "env.EPOCHS", "string");
  ExpectBad(Spec({{"env", {"A=B"}}}), "env");
}

TEST(JobSpecFromJson, Secrets) {
  JobSpec s = Parse(Spec({{"secrets", {{"HF_TOKEN", "hf_abc"}}}, {"env", {{"A", "1"}}}}));
  EXPECT_EQ(s.secrets.at("HF_TOKEN"), "hf_abc");
  EXPECT_EQ(ToJson(s)["secrets"]["HF_TOKEN"], "hf_abc") << "a spec carries the values";
  ExpectBad(Spec({{"secrets", {{"1BAD", "x"}}}}), "secrets.1BAD", "environment variable");
  json unfilled = Spec();
  unfilled["secrets"] = {{"HF_TOKEN", nullptr}};  // merge_patch would drop a null
  ExpectBad(unfilled, "secrets.HF_TOKEN", "tide submit --secret HF_TOKEN");
  ExpectBad(Spec({{"secrets", {{"HF_TOKEN", ""}}}}), "secrets.HF_TOKEN", "empty");
  ExpectBad(Spec({{"secrets", {{"K", 5}}}}), "secrets.K", "string");
  ExpectBad(Spec({{"secrets", {{"A", "x"}}}, {"env", {{"A", "1"}}}}), "secrets.A", "also in env");
  ExpectBad(Spec({{"secrets", {{"A", std::string(65 << 10, 'x')}}}}), "secrets.A", "64 KiB");
  ExpectBad(Spec({{"secrets", {"A=B"}}}), "secrets");
  json many = json::object();
  for (int i = 0; i < 65; ++i) many["S" + std::to_string(i)] = "v";
  ExpectBad(Spec({{"secrets", many}}), "secrets", "at most 64");
}

TEST(JobJson, SecretsAreNamedNeverShown) {
  Job job;
  job.id = "j-1";
  job.spec = Parse(Spec({{"secrets", {{"HF_TOKEN", "hf_abc"}, {"DB_PASS", "pw-9"}}}}));
  json j = ToJson(job);
  EXPECT_EQ(j["secrets"], json({"DB_PASS", "HF_TOKEN"}));
  EXPECT_EQ(j.dump().find("hf_abc"), std::string::npos);
  auto back = JobFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->spec.secrets, (std::map<std::string, std::string>{{"DB_PASS", ""}, {"HF_TOKEN", ""}}));
  // An assignment carries the values, and reads back with them.
  AgentWork w;
  w.assignments.push_back({job, {}});
  auto work = AgentWorkFromJson(ToJson(w));
  ASSERT_TRUE(work.ok()) << work.status().ToString();
  EXPECT_EQ(work->assignments[0].job.spec.secrets.at("HF_TOKEN"), "hf_abc");
}

TEST(JobSpecFromJson, CodeId) {
  std::string id(64, 'a');
  EXPECT_EQ(Parse(Spec({{"code", id}})).code, id);
  // Ids are lowercase hex; the same id in uppercase names the same archive.
  EXPECT_EQ(Parse(Spec({{"code", std::string(64, 'F')}})).code, std::string(64, 'f'));
  ExpectBad(Spec({{"code", "abc"}}), "code", "64 hex");
  ExpectBad(Spec({{"code", std::string(64, 'g')}}), "code");
  ExpectBad(Spec({{"code", std::string(65, 'a')}}), "code");
  ExpectBad(Spec({{"code", "../../etc/passwd"}}), "code");
  ExpectBad(Spec({{"code", ""}}), "code");
}

TEST(JobSpecFromJson, ToJsonRoundTrips) {
  JobSpec s = Parse(J(R"({"name": "n", "image": "img", "command": "echo hi",
      "env": {"A": "1"}, "resources": {"gpu_count": 4, "gpu_type": ["A100", "H100"],
      "gpu_memory": "80GB", "cpus": 16, "memory": "256GB"}, "max_runtime": "1d",
      "grace": "90s", "code": ")" +
                      std::string(64, 'c') + R"(", "tags": ["t1", "t2"]})"));
  json j = ToJson(s);
  JobSpec back = Parse(j);
  EXPECT_EQ(ToJson(back), j);
  EXPECT_EQ(back.command, s.command);
  EXPECT_EQ(back.resources.gpu_types, s.resources.gpu_types);
  EXPECT_EQ(back.resources.gpu_memory_mb, 81920);
  EXPECT_EQ(back.resources.memory_mb, 262144);
  EXPECT_EQ(back.max_runtime_s, 86400);
  EXPECT_EQ(back.grace_s, 90);
  EXPECT_EQ(back.code, std::string(64, 'c'));
  EXPECT_EQ(back.tags, s.tags);
  EXPECT_EQ(back.env, s.env);
}

Job SampleJob() {
  Job job;
  job.id = "j-3f9a0c1d2e4b";
  job.owner = "u-1";
  job.spec = Parse(Spec({{"name", "sweep-1"}, {"max_runtime", "2h"}, {"tags", {"a"}}}));
  job.status = JobStatus::kFailed;
  job.reason = "exit_code:3";
  job.exit_code = 3;
  job.attempt = 2;
  job.node_id = "n-1";
  job.gpus = {0, 3};
  job.created_at = 1700000000000;
  job.started_at = 1700000001000;
  job.finished_at = 1700000002000;
  job.cancel_requested = true;
  job.cancel_reason = "user";
  Attempt a1;
  a1.attempt = 1;
  a1.node_id = "n-0";
  a1.gpus = {1};
  a1.started_at = 10;
  a1.finished_at = 20;
  a1.reason = "node_lost";  // no exit code
  Attempt a2;
  a2.attempt = 2;
  a2.node_id = "n-1";
  a2.gpus = {0, 3};
  a2.exit_code = 0;
  job.attempts = {a1, a2};
  return job;
}

TEST(Job, RoundTrip) {
  Job job = SampleJob();
  json j = ToJson(job);
  EXPECT_EQ(j["status"], "failed");
  EXPECT_EQ(j["exit_code"], 3);
  EXPECT_TRUE(j["attempts"][0]["exit_code"].is_null());
  EXPECT_EQ(j["attempts"][1]["exit_code"], 0);
  auto back = JobFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ToJson(*back), j);
  EXPECT_EQ(back->id, job.id);
  EXPECT_EQ(back->owner, job.owner);
  EXPECT_EQ(back->status, JobStatus::kFailed);
  EXPECT_EQ(back->exit_code, 3);
  EXPECT_EQ(back->attempt, 2);
  EXPECT_EQ(back->gpus, job.gpus);
  EXPECT_EQ(back->spec.max_runtime_s, 7200);
  EXPECT_TRUE(back->cancel_requested);
  ASSERT_EQ(back->attempts.size(), 2u);
  EXPECT_EQ(back->attempts[0].exit_code, std::nullopt);  // null stays null
  EXPECT_EQ(back->attempts[1].exit_code, 0);             // 0 stays 0
  EXPECT_EQ(back->attempts[0].reason, "node_lost");
  EXPECT_EQ(back->attempts[1].gpus, (std::vector<int>{0, 3}));
}

TEST(Job, GangAttemptRoundTripsAndCountsEveryRank) {
  Job job = SampleJob();
  Attempt a;
  a.attempt = 3;
  a.node_id = "n-a";
  a.gpus = {0, 1};
  a.started_at = 1'000;
  a.finished_at = 11'000;
  a.master_addr = "10.0.0.5";
  a.master_port = 29600;
  a.ranks = {{"n-a", {0, 1}, 0, 1'000, 11'000, "", 0}, {"n-b", {2, 3}, 0, 2'000, 6'000, "", 3}};
  job.attempts.push_back(a);
  job.gang_failure = "exit_code:3";
  auto back = JobFromJson(ToJson(job));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ToJson(*back), ToJson(job));
  const Attempt& b = back->attempts.back();
  ASSERT_EQ(b.ranks.size(), 2u);
  EXPECT_EQ(b.ranks[1].node_id, "n-b");
  EXPECT_EQ(b.ranks[1].exit_code, 3);
  EXPECT_EQ(b.master_port, 29600);
  EXPECT_EQ(back->gang_failure, "exit_code:3");
  // Rank 0: 10 s on 2 GPUs; rank 1: 4 s on 2 GPUs.
  EXPECT_DOUBLE_EQ(AttemptGpuSeconds(b, 0), 28.0);
  // A single-node attempt still running counts to now.
  Attempt single;
  single.gpus = {0};
  single.started_at = 1'000;
  EXPECT_DOUBLE_EQ(AttemptGpuSeconds(single, 4'000), 3.0);
}

TEST(Job, ExitCodeNullVersusZero) {
  Job job = SampleJob();
  job.exit_code.reset();
  json j = ToJson(job);
  EXPECT_TRUE(j["exit_code"].is_null());
  EXPECT_EQ(JobFromJson(j)->exit_code, std::nullopt);
  job.exit_code = 0;
  j = ToJson(job);
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_EQ(JobFromJson(j)->exit_code, 0);
}

TEST(Job, FromJsonRejectsBadRecordsWithoutThrowing) {
  EXPECT_FALSE(JobFromJson(json::array()).ok());
  json j = ToJson(SampleJob());
  j["status"] = "exploded";
  EXPECT_EQ(JobFromJson(j).status().field(), "status");
  // Wrong types are errors, not exceptions.
  for (const char* key : {"id", "attempt", "created_at", "cancel_requested", "reason"}) {
    json k = ToJson(SampleJob());
    k[key] = json::array();
    EXPECT_FALSE(JobFromJson(k).ok()) << key;
  }
  json bad_attempt = ToJson(SampleJob());
  bad_attempt["attempts"][0] = "x";
  EXPECT_FALSE(JobFromJson(bad_attempt).ok());
  bad_attempt["attempts"][0] = {{"node_id", 7}};
  EXPECT_FALSE(JobFromJson(bad_attempt).ok());
  json bad_spec = ToJson(SampleJob());
  bad_spec["resources"]["gpu_count"] = 0;
  auto r = JobFromJson(bad_spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "resources.gpu_count");
}

TEST(JobStatus, NamesAndTerminal) {
  for (auto s : {JobStatus::kQueued, JobStatus::kStarting, JobStatus::kRunning,
                 JobStatus::kCompleted, JobStatus::kFailed, JobStatus::kCancelled}) {
    EXPECT_EQ(ParseJobStatus(JobStatusName(s)), s);
  }
  EXPECT_EQ(ParseJobStatus("done"), std::nullopt);
  EXPECT_TRUE(IsTerminal(JobStatus::kCompleted));
  EXPECT_TRUE(IsTerminal(JobStatus::kFailed));
  EXPECT_TRUE(IsTerminal(JobStatus::kCancelled));
  EXPECT_FALSE(IsTerminal(JobStatus::kQueued));
  EXPECT_FALSE(IsTerminal(JobStatus::kStarting));
  EXPECT_FALSE(IsTerminal(JobStatus::kRunning));
}

TEST(Node, RoundTrip) {
  Node n;
  n.id = "n-1";
  n.name = "gamer-rig";
  n.hostname = "desk.local";
  n.state = NodeState::kLost;
  n.registered_at = 5;
  n.last_heartbeat = 6;
  Gpu g;
  g.index = 0;
  g.name = "NVIDIA GeForce RTX 4090";
  g.model = "RTX4090";
  g.memory_mb = 24564;
  g.uuid = "GPU-1234";
  g.utilization_pct = 97;
  g.memory_used_mb = 20000;
  g.temperature_c = 71;
  Gpu h = g;
  h.index = 1;
  h.utilization_pct = -1;
  n.gpus = {g, h};
  json j = ToJson(n);
  EXPECT_EQ(j["state"], "lost");
  auto back = NodeFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ToJson(*back), j);
  EXPECT_EQ(back->state, NodeState::kLost);
  ASSERT_EQ(back->gpus.size(), 2u);
  EXPECT_EQ(back->gpus[0].temperature_c, 71);
  EXPECT_EQ(back->gpus[1].utilization_pct, -1);

  json bad = j;
  bad["gpus"][1]["index"] = "one";
  EXPECT_EQ(NodeFromJson(bad).status().field(), "gpus[1].index");
  bad = j;
  bad["hostname"] = 3;
  EXPECT_FALSE(NodeFromJson(bad).ok());
}

TEST(Gpu, ModelDefaultsToCanonicalName) {
  auto g = GpuFromJson(J(R"({"index": 2, "name": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920})"),
                       "gpus[0]");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->model, "A100");
  EXPECT_EQ(g->utilization_pct, -1);
  EXPECT_EQ(GpuFromJson(J(R"({"index": 2})"), "gpus[0]").status().field(), "gpus[0].name");
  EXPECT_EQ(GpuFromJson(J(R"({"index": -1, "name": "x"})"), "g").status().field(), "g.index");
  EXPECT_EQ(GpuFromJson(J(R"({"index": 0, "name": "x", "vram": 1})"), "g").status().field(),
            "g.vram");
}

TEST(CanonicalGpuModel, DriverNamesAndUserSpellings) {
  EXPECT_EQ(CanonicalGpuModel("NVIDIA GeForce RTX 4090"), "RTX4090");
  EXPECT_EQ(CanonicalGpuModel("NVIDIA A100-SXM4-80GB"), "A100");
  EXPECT_EQ(CanonicalGpuModel("NVIDIA A100-PCIE-40GB"), "A100");
  EXPECT_EQ(CanonicalGpuModel("NVIDIA H200"), "H200");
  EXPECT_EQ(CanonicalGpuModel("rtx 4090"), "RTX4090");
  EXPECT_EQ(CanonicalGpuModel("RTX4090"), "RTX4090");
  EXPECT_EQ(CanonicalGpuModel("Tesla V100-SXM2-16GB"), "V100");
  EXPECT_EQ(CanonicalGpuModel("Tesla T4"), "T4");
  EXPECT_EQ(CanonicalGpuModel("H100"), "H100");
  EXPECT_EQ(CanonicalGpuModel("a100"), "A100");
  // Names where memory or form factor follow after a space (real NVML names).
  EXPECT_EQ(CanonicalGpuModel("NVIDIA H100 80GB HBM3"), "H100");
  EXPECT_EQ(CanonicalGpuModel("NVIDIA A100 80GB PCIe"), "A100");
  EXPECT_EQ(CanonicalGpuModel("NVIDIA H100 PCIe"), "H100");
  EXPECT_EQ(CanonicalGpuModel("NVIDIA H100 NVL"), "H100");
  EXPECT_EQ(CanonicalGpuModel("NVIDIA GH200 480GB"), "GH200");
  EXPECT_EQ(CanonicalGpuModel("A100 80GB"), "A100");
  // Words that are part of the model stay.
  EXPECT_EQ(CanonicalGpuModel("NVIDIA GeForce RTX 3090 Ti"), "RTX3090TI");
  EXPECT_EQ(CanonicalGpuModel("NVIDIA RTX A6000"), "RTXA6000");
  EXPECT_EQ(CanonicalGpuModel("NVIDIA RTX 6000 Ada Generation"), "RTX6000ADA");
  EXPECT_EQ(CanonicalGpuModel("Quadro RTX 8000"), "RTX8000");
  EXPECT_EQ(CanonicalGpuModel("NVIDIA L40S"), "L40S");
  EXPECT_EQ(CanonicalGpuModel("any"), "ANY");
  EXPECT_EQ(CanonicalGpuModel(""), "");
  // The job's requested type and the node's driver name meet at the same value.
  EXPECT_EQ(CanonicalGpuModel("RTX 4090"), CanonicalGpuModel("NVIDIA GeForce RTX 4090"));
}

TEST(ParseMemoryMb, Units) {
  EXPECT_EQ(*ParseMemoryMb("24GB"), 24576);
  EXPECT_EQ(*ParseMemoryMb("24G"), 24576);
  EXPECT_EQ(*ParseMemoryMb("24gb"), 24576);
  EXPECT_EQ(*ParseMemoryMb("80GiB"), 81920);
  EXPECT_EQ(*ParseMemoryMb("24576MB"), 24576);
  EXPECT_EQ(*ParseMemoryMb("512M"), 512);
  EXPECT_EQ(*ParseMemoryMb("512MiB"), 512);
  EXPECT_EQ(*ParseMemoryMb("512"), 512);
  EXPECT_EQ(*ParseMemoryMb("1TB"), 1048576);
  EXPECT_EQ(*ParseMemoryMb("0"), 0);
  EXPECT_EQ(*ParseMemoryMb("999999999999TB"), int64_t{999999999999} * 1024 * 1024);
  for (const char* bad :
       {"", "GB", "-1GB", "1.5GB", "24 GB", "24KB", "24PB", "1e3", "9999999999999GB", "24GBs"}) {
    auto r = ParseMemoryMb(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    }
  }
}

TEST(ErrorJson, ShapeAndRoundTrip) {
  Status s = Status::InvalidArgument("must be at least 1", "resources.gpu_count");
  json e = ErrorJson(s);
  EXPECT_EQ(e, J(R"({"error": {"code": "invalid_argument", "message": "must be at least 1",
                                "field": "resources.gpu_count"}})"));
  Status back = StatusFromErrorJson(400, e.dump());
  EXPECT_EQ(back.code(), Code::kInvalidArgument);
  EXPECT_EQ(back.message(), s.message());
  EXPECT_EQ(back.field(), s.field());

  EXPECT_FALSE(ErrorJson(Status::NotFound("no such job")).at("error").contains("field"));

  struct Case {
    Status status;
    int http;
  };
  const Case cases[] = {
      {Status::NotFound("job j-1"), 404},      {Status::Conflict("exists"), 409},
      {Status::Unauthenticated("token"), 401}, {Status::PermissionDenied("admin"), 403},
      {Status::TooLarge("body"), 413},         {Status::Unavailable("later"), 503},
      {Status::Internal("bug"), 500},
  };
  for (const auto& c : cases) {
    Status r = StatusFromErrorJson(c.http, ErrorJson(c.status).dump());
    EXPECT_EQ(r.code(), c.status.code()) << c.status.ToString();
    EXPECT_EQ(r.message(), c.status.message());
    // The code field wins over an unexpected HTTP status.
    EXPECT_EQ(StatusFromErrorJson(500, ErrorJson(c.status).dump()).code(), c.status.code())
        << c.status.ToString();
  }
}

TEST(ErrorJson, NonJsonAndOddBodies) {
  Status s = StatusFromErrorJson(502, "<html>Bad Gateway</html>");
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_NE(s.message().find("HTTP 502"), std::string::npos);
  EXPECT_NE(s.message().find("Bad Gateway"), std::string::npos);
  EXPECT_EQ(StatusFromErrorJson(404, "").code(), Code::kNotFound);
  EXPECT_EQ(StatusFromErrorJson(400, "{}").code(), Code::kInvalidArgument);
  // Wrong types inside "error" are ignored, not thrown.
  Status odd = StatusFromErrorJson(409, R"({"error": {"message": 5, "field": [], "code": 1}})");
  EXPECT_EQ(odd.code(), Code::kConflict);
  EXPECT_EQ(odd.message(), "HTTP 409");
}

TEST(ErrorJson, InvalidUtf8InMessageStillSerialises) {
  json e = ErrorJson(Status::InvalidArgument("malformed JSON: last read: '\xff\xfe'", "a\xc3"));
  std::string text;
  ASSERT_NO_THROW(text = e.dump());
  EXPECT_EQ(StatusFromErrorJson(400, text).code(), Code::kInvalidArgument);
}

TEST(JobEvent, RoundTripAndValidation) {
  JobEvent e;
  e.attempt = 2;
  e.state = "exited";
  e.exit_code = 0;
  e.reason = "";
  e.message = "done";
  auto back = JobEventFromJson(ToJson(e));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->attempt, 2);
  EXPECT_EQ(back->state, "exited");
  EXPECT_EQ(back->exit_code, 0);
  EXPECT_EQ(back->message, "done");

  JobEvent running;
  running.attempt = 1;
  running.state = "running";
  auto r = JobEventFromJson(ToJson(running));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, std::nullopt);

  auto bad = JobEventFromJson(J(R"({"attempt": 1, "state": "exploded"})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().field(), "state");
  EXPECT_EQ(JobEventFromJson(J(R"({"state": "running"})")).status().field(), "attempt");
  EXPECT_EQ(JobEventFromJson(J(R"({"attempt": 1, "state": "running", "x": 1})")).status().field(),
            "x");
  auto longmsg = JobEventFromJson(
      json{{"attempt", 1}, {"state", "exited"}, {"message", std::string(10000, 'm')}});
  ASSERT_TRUE(longmsg.ok());
  EXPECT_EQ(longmsg->message.size(), 4096u);
}

TEST(AgentProtocol, RoundTrips) {
  RegisterRequest reg;
  reg.name = "rig";
  reg.hostname = "h";
  Gpu g;
  g.name = "NVIDIA H200";
  g.model = "H200";
  g.memory_mb = 143771;
  reg.gpus = {g};
  reg.address = "10.0.0.5";
  auto r = RegisterRequestFromJson(ToJson(reg));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->gpus.at(0).model, "H200");
  EXPECT_EQ(r->address, "10.0.0.5");
  EXPECT_EQ(RegisterRequestFromJson(J(R"({"name": "x", "address": "a b"})")).status().field(),
            "address");
  EXPECT_EQ(RegisterRequestFromJson(J(R"({"name": ""})")).status().field(), "name");
  EXPECT_EQ(r->images, std::vector<std::string>{"host"});  // what agents offered before images
  reg.images = {"busybox", "pytorch-2.3"};
  reg.runtime = "oci";
  auto oci = RegisterRequestFromJson(ToJson(reg));
  ASSERT_TRUE(oci.ok()) << oci.status().ToString();
  EXPECT_EQ(oci->images, reg.images);
  EXPECT_EQ(oci->runtime, "oci");
  for (const char* bad : {R"({"name": "x", "images": []})", R"({"name": "x", "images": ["a b"]})",
                          R"({"name": "x", "images": [3]})", R"({"name": "x", "images": "host"})"}) {
    EXPECT_EQ(RegisterRequestFromJson(J(bad)).status().field(), "images") << bad;
  }
  EXPECT_EQ(RegisterRequestFromJson(J(R"({"name": "x", "runtime": "docker"})")).status().field(),
            "runtime");
  // What of the host jobs may use.
  reg.cpus = 15.5;
  reg.memory_mb = 65'536;
  auto host = RegisterRequestFromJson(ToJson(reg));
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_EQ(host->cpus, 15.5);
  EXPECT_EQ(host->memory_mb, 65'536);
  for (const char* bad : {R"({"name": "x", "cpus": -1})", R"({"name": "x", "cpus": 100000})",
                          R"({"name": "x", "cpus": "8"})"}) {
    EXPECT_EQ(RegisterRequestFromJson(J(bad)).status().field(), "cpus") << bad;
  }
  for (const char* bad : {R"({"name": "x", "memory_mb": -5})", R"({"name": "x", "memory_mb": 1.5})"}) {
    EXPECT_EQ(RegisterRequestFromJson(J(bad)).status().field(), "memory_mb") << bad;
  }
  Node node;
  node.cpus = 8;
  node.memory_mb = 1024;
  auto n = NodeFromJson(ToJson(node));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->cpus, 8);
  EXPECT_EQ(n->memory_mb, 1024);

  Heartbeat hb;
  hb.gpus = {g};
  hb.running = {{"j-1", 2}};
  auto h = HeartbeatFromJson(ToJson(hb));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->running.size(), 1u);
  EXPECT_EQ(h->running[0].job_id, "j-1");
  EXPECT_EQ(h->running[0].attempt, 2);
  EXPECT_EQ(HeartbeatFromJson(J(R"({"running": [{"job_id": "j"}]})")).status().field(),
            "running[0].attempt");

  AgentWork w;
  w.assignments = {{SampleJob(), {}}, {SampleJob(), {1, 2, "10.0.0.5", 29517}}};
  w.cancels = {{"j-2", 1, "timeout", 10}};
  auto back = AgentWorkFromJson(ToJson(w));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->assignments.size(), 2u);
  // An agent gets what it runs the attempt with, nothing of the job's
  // owner, history or the server's control flags.
  const Job& got = back->assignments[0].job;
  const Job sent = SampleJob();
  EXPECT_EQ(got.id, sent.id);
  EXPECT_EQ(got.attempt, sent.attempt);
  EXPECT_EQ(ToJson(got.spec), ToJson(sent.spec));
  EXPECT_EQ(got.node_id, sent.node_id);
  EXPECT_EQ(got.gpus, sent.gpus);
  ASSERT_EQ(got.attempts.size(), 1u) << "only why the attempt before ended";
  EXPECT_EQ(got.attempts[0].attempt, 1);
  EXPECT_EQ(got.attempts[0].reason, "node_lost");
  json wire = ToJson(w)["assignments"][0];
  for (const char* kept_back : {"owner", "status", "reason", "pending_reason", "cancel_requested",
                                "cancel_reason", "preempt_requested", "created_at", "retries"}) {
    EXPECT_FALSE(wire.contains(kept_back)) << kept_back;
  }
  Job trial = SampleJob();
  trial.batch = "b-1";
  trial.trial = "grid-1";
  trial.params = {{"lr", "0.1"}};
  trial.checkpoint_attempt = 1;
  trial.checkpoint_bytes = 10;
  AgentWork tw;
  tw.assignments = {{trial, {}}};
  auto tb = AgentWorkFromJson(ToJson(tw));
  ASSERT_TRUE(tb.ok()) << tb.status().ToString();
  EXPECT_EQ(tb->assignments[0].job.params, trial.params);
  EXPECT_EQ(tb->assignments[0].job.trial, "grid-1");
  EXPECT_EQ(tb->assignments[0].job.checkpoint_attempt, 1);
  EXPECT_EQ(back->assignments[0].gang.nnodes, 1);
  EXPECT_EQ(back->assignments[1].gang.rank, 1);
  EXPECT_EQ(back->assignments[1].gang.nnodes, 2);
  EXPECT_EQ(back->assignments[1].gang.master_addr, "10.0.0.5");
  EXPECT_EQ(back->assignments[1].gang.master_port, 29517);
  ASSERT_EQ(back->cancels.size(), 1u);
  EXPECT_EQ(back->cancels[0].reason, "timeout");
  EXPECT_EQ(back->cancels[0].grace_s, 10);
  EXPECT_FALSE(AgentWorkFromJson(J(R"({"cancels": ["j-1"]})")).ok());
  EXPECT_FALSE(AgentWorkFromJson(J(R"({"cancels": [{"attempt": "x"}]})")).ok());
}

TEST(AgentWorkJson, CarriesTheServersPinsAndRefusesOthers) {
  AgentWork w;
  w.tls_pins = {"sha256:" + std::string(64, 'a'), "sha256:" + std::string(64, 'b')};
  auto back = AgentWorkFromJson(ToJson(w));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tls_pins, w.tls_pins);
  EXPECT_FALSE(ToJson(AgentWork{}).contains("tls_pins")) << "plain HTTP announces none";
  auto bad = AgentWorkFromJson(J(R"({"tls_pins": ["sha256:nothex"]})"));
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().field(), "tls_pins");
}

}  // namespace
}  // namespace tide::api
