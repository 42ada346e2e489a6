// PlanSbatch: Slurm directives into typed specs (api/sbatch.h).
#include "api/sbatch.h"

#include <gtest/gtest.h>

namespace tide::api {
namespace {

SbatchPlan Plan(const std::string& script, const std::vector<std::string>& cli = {},
                const std::vector<std::string>& args = {}) {
  auto p = PlanSbatch(script, "train.sh", cli, args);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : SbatchPlan{};
}

void ExpectRefused(const std::string& script, const std::string& part,
                   const std::vector<std::string>& cli = {}) {
  auto p = PlanSbatch(script, "train.sh", cli, {});
  ASSERT_FALSE(p.ok()) << "accepted:\n" << script;
  EXPECT_NE(p.status().message().find(part), std::string::npos) << p.status().ToString();
}

TEST(SbatchTest, EachDirectiveInBothForms) {
  for (const char* script : {
           "#!/bin/bash\n#SBATCH --job-name=bert\n#SBATCH --partition=gpu\n#SBATCH --gres=gpu:A100:2\n"
           "#SBATCH --nodes=2\n#SBATCH --cpus-per-task=8\n#SBATCH --mem=64G\n#SBATCH --time=1-02:30:00\n"
           "python train.py\n",
           "#!/bin/bash\n#SBATCH --job-name bert\n#SBATCH -p gpu\n#SBATCH --gres gpu:A100:2\n"
           "#SBATCH -N 2\n#SBATCH -c 8\n#SBATCH --mem 64G\n#SBATCH -t 1-02:30:00\npython train.py\n",
           "#!/bin/bash\n#SBATCH -J bert -p gpu --gres=gpu:A100:2 -N2 -c8 --mem=65536 --time 1590\n",
       }) {
    SbatchPlan p = Plan(script);
    EXPECT_EQ(p.spec.name, "bert") << script;
    EXPECT_EQ(p.spec.constraints.at("partition"), "gpu");
    EXPECT_EQ(p.spec.resources.gpu_count, 2);
    EXPECT_EQ(p.spec.resources.gpu_types, std::vector<std::string>{"A100"});
    EXPECT_EQ(p.spec.resources.nodes, 2);
    EXPECT_EQ(p.spec.resources.cpus, 8);
    EXPECT_EQ(p.spec.resources.memory_mb, 65536);
    EXPECT_EQ(p.spec.max_runtime_s, 95400) << script;
    EXPECT_TRUE(p.spec.slurm);
    EXPECT_FALSE(p.array);
  }
}

TEST(SbatchTest, GpusAreTotalsAndTheCommandLineWins) {
  SbatchPlan p = Plan("#!/bin/sh\n#SBATCH --gpus=4\n#SBATCH --nodes=2\n", {"--gpus=rtx4090:8"});
  EXPECT_EQ(p.spec.resources.gpu_count, 4);  // 8 over 2 nodes
  EXPECT_EQ(p.spec.resources.gpu_types, std::vector<std::string>{"RTX4090"});  // canonical
  p = Plan("#!/bin/sh\n#SBATCH --job-name=a\n", {"-J", "b"});
  EXPECT_EQ(p.spec.name, "b");
  p = Plan("#!/bin/sh\necho hi\n#SBATCH --job-name=late\n");
  EXPECT_EQ(p.spec.name, "train.sh") << "directives after the first command are not read";
}

TEST(SbatchTest, TimesInEverySlurmForm) {
  EXPECT_EQ(*ParseSlurmTime("30"), 1800);
  EXPECT_EQ(*ParseSlurmTime("30:15"), 1815);
  EXPECT_EQ(*ParseSlurmTime("02:00:00"), 7200);
  EXPECT_EQ(*ParseSlurmTime("1-0"), 86400);
  EXPECT_EQ(*ParseSlurmTime("1-02:30"), 95400);
  EXPECT_EQ(*ParseSlurmTime("2-00:00:01"), 172801);
  EXPECT_EQ(*ParseSlurmTime("UNLIMITED"), 0);
  EXPECT_FALSE(ParseSlurmTime("1h").ok());
  EXPECT_FALSE(ParseSlurmTime("1:2:3:4").ok());
}

TEST(SbatchTest, ArraysBecomeBatches) {
  std::vector<int> tasks;
  int cap = 0;
  ASSERT_TRUE(ParseSlurmArray("0-9%2", &tasks, &cap).ok());
  EXPECT_EQ(tasks.size(), 10u);
  EXPECT_EQ(cap, 2);
  tasks.clear();
  ASSERT_TRUE(ParseSlurmArray("1,3,5-7,0-12:6", &tasks, &cap).ok());
  EXPECT_EQ(tasks, (std::vector<int>{1, 3, 5, 6, 7, 0, 12}));
  EXPECT_FALSE(ParseSlurmArray("9-1", &tasks, &cap).ok());
  EXPECT_FALSE(ParseSlurmArray("a-b", &tasks, &cap).ok());

  SbatchPlan p = Plan("#!/bin/bash\n#SBATCH --array=0-3%2\n#SBATCH --output=logs/%x_%A_%a.out\n");
  ASSERT_TRUE(p.array);
  EXPECT_EQ(p.batch.max_concurrent, 2);
  EXPECT_EQ(p.batch.trials.size(), 4u);
  EXPECT_EQ(p.batch.job_template["env"]["SLURM_ARRAY_TASK_ID"], "{task}");
  const std::string wrapper = p.batch.job_template["command"][2];
  EXPECT_NE(wrapper.find("'logs/'\"$SLURM_JOB_NAME\"'_'"), std::string::npos) << wrapper;
}

TEST(SbatchTest, OutputPatternsAndSignals) {
  SbatchPlan p = Plan("#!/bin/bash\n#SBATCH -o out-%j.txt -e err-%N.txt\n#SBATCH --time=10\n"
                      "#SBATCH --signal=B:TERM@60\n");
  const std::string wrapper = p.spec.command[2];
  EXPECT_NE(wrapper.find("'out-'\"$SLURM_JOB_ID\"'.txt'"), std::string::npos) << wrapper;
  EXPECT_NE(wrapper.find("'err-'\"$SLURMD_NODENAME\"'.txt'"), std::string::npos) << wrapper;
  EXPECT_EQ(p.spec.max_runtime_s, 540);
  EXPECT_EQ(p.spec.grace_s, 60);
  p = Plan("#!/bin/bash\n#SBATCH --output=/scratch/me/run.out\n");
  EXPECT_NE(p.spec.command[2].find("'run.out'"), std::string::npos);
  ASSERT_EQ(p.warnings.size(), 2u);  // the absolute path, and no GPUs asked for
}

TEST(SbatchTest, DependenciesAndHarmlessDirectives) {
  SbatchPlan p = Plan("#!/bin/bash\n#SBATCH --gres=gpu:1\n#SBATCH --dependency=afterok:j-1:j-2,afterany:j-3\n"
                      "#SBATCH --mail-type=END\n#SBATCH --account=lab\n#SBATCH --requeue\n");
  EXPECT_EQ(p.spec.depends_on.size(), 3u);
  EXPECT_EQ(p.spec.depends_on[2].condition, "afterany");
  EXPECT_EQ(p.warnings.size(), 3u);
  EXPECT_NE(p.warnings[0].find("train.sh:"), std::string::npos) << p.warnings[0];
}

TEST(SbatchTest, WhatWouldChangeTheResultIsRefusedNamingTheLine) {
  ExpectRefused("echo no shebang\n", "#!");
  ExpectRefused("#!/bin/bash\n#SBATCH --nodelist=gpu01\n", "train.sh:2: --nodelist");
  ExpectRefused("#!/bin/bash\n#SBATCH --signal=USR1@90\n#SBATCH --time=60\n", "not USR1");
  ExpectRefused("#!/bin/bash\n#SBATCH --partition=a,b\n", "list of partitions");
  ExpectRefused("#!/bin/bash\n#SBATCH --nodes=2-4\n", "--nodes");
  ExpectRefused("#!/bin/bash\n#SBATCH --gpus=3\n#SBATCH --nodes=2\n", "split evenly");
  ExpectRefused("#!/bin/bash\n#SBATCH --bogus=1\n", "train.sh:2: unknown sbatch option --bogus");
  ExpectRefused("#!/bin/bash\n#SBATCH --time=abc\n", "--time");
  ExpectRefused("#!/bin/bash\n#SBATCH --dependency=after:1\n", "\"after\"");
  ExpectRefused("#!/bin/bash\n#SBATCH --output=../x\n", "inside the job's outputs");
  ExpectRefused("#!/bin/bash\n#SBATCH --output=%s.out\n", "%s");
  ExpectRefused("#!/bin/bash\n", "--begin", {"--begin=now+1h"});
}

TEST(SbatchTest, AnArrayTaskRunsTheJobWithItsArrayVariables) {
  SbatchPlan p = Plan("#!/bin/bash\n#SBATCH --array=1,5 --gres=gpu:2\n#SBATCH -J sweep{x}\n");
  ASSERT_TRUE(p.array);
  ASSERT_EQ(p.batch.trials.size(), 2u);
  EXPECT_EQ(p.batch.name, "sweep{x}");
  EXPECT_EQ(p.batch.trials[1].id, "5");
  auto task = TrialJobSpec(p.batch, p.batch.trials[1]);
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  EXPECT_EQ(task->name, "sweep{x}");  // braces of the script are literal
  EXPECT_EQ(task->resources.gpu_count, 2);
  EXPECT_TRUE(task->slurm);
  EXPECT_EQ(task->env.at("SLURM_ARRAY_TASK_ID"), "5");
  EXPECT_EQ(task->env.at("SLURM_ARRAY_TASK_COUNT"), "2");
  EXPECT_EQ(task->env.at("SLURM_ARRAY_TASK_MIN"), "1");
  EXPECT_EQ(task->env.at("SLURM_ARRAY_TASK_MAX"), "5");
  EXPECT_EQ(task->command, p.spec.command);
}

TEST(SbatchTest, ScriptArgumentsFollowTheScriptAndNiceIsPriority) {
  SbatchPlan p = Plan("#!/bin/bash\n#SBATCH --nice=100\n#SBATCH --mem-per-gpu=8G\n#SBATCH --gpus-per-node=2\n",
                      {}, {"--epochs", "3"});
  ASSERT_EQ(p.spec.command.size(), 6u);
  EXPECT_EQ(p.spec.command[0], "/bin/bash");
  EXPECT_EQ(p.spec.command[3], ".tide/sbatch/train.sh");
  EXPECT_EQ(p.script_in_code, ".tide/sbatch/train.sh") << "where the caller puts the script";
  EXPECT_EQ(p.spec.command[4], "--epochs");
  EXPECT_EQ(p.spec.command[5], "3");
  EXPECT_EQ(p.spec.priority, -100);
  EXPECT_EQ(p.spec.resources.memory_mb, 2 * 8192);
  EXPECT_TRUE(p.spec.code.empty()) << "the caller uploads the script";
}

TEST(SbatchTest, TasksAreWhatSrunStartsByDefault) {
  SbatchPlan p = Plan("#!/bin/bash\n#SBATCH --ntasks=4\n#SBATCH --nodes=2\n#SBATCH -c 2\n");
  EXPECT_EQ(p.spec.env.at("SLURM_NTASKS"), "4");
  EXPECT_EQ(p.spec.env.at("SLURM_NPROCS"), "4");
  EXPECT_EQ(p.spec.resources.cpus, 4) << "2 tasks per node, 2 CPUs each";
  bool warned = false;
  for (const auto& w : p.warnings) warned = warned || w.find("runs on each of the 2 nodes") != std::string::npos;
  EXPECT_TRUE(warned);

  p = Plan("#!/bin/bash\n#SBATCH --ntasks-per-node=3\n#SBATCH -N 2\n");
  EXPECT_EQ(p.spec.env.at("SLURM_NTASKS"), "6");
  EXPECT_EQ(p.spec.env.at("SLURM_NTASKS_PER_NODE"), "3");

  p = Plan("#!/bin/bash\necho one task\n");
  EXPECT_EQ(p.spec.env.count("SLURM_NTASKS"), 0u) << "the agent's default: one per node";
  EXPECT_TRUE(p.warnings.size() == 1) << "only the GPU warning for a one-node job";

  // An array's tasks keep them.
  p = Plan("#!/bin/bash\n#SBATCH --array=0-1\n#SBATCH -n 2\n");
  ASSERT_TRUE(p.array);
  EXPECT_EQ(p.batch.job_template["env"]["SLURM_NTASKS"], "2");
}

TEST(SbatchTest, ABadGpuTypeIsRefusedNamingTheLine) {
  ExpectRefused("#!/bin/bash\n\n#SBATCH --gres=gpu:???:2\n", "train.sh:3: --gres: \"???\" is not a GPU model");
  // Found by sbatch_fuzz: a directive that is not UTF-8 became a job name
  // that could not be written as JSON.
  ExpectRefused("#!/bin/bash\n#SBATCH --job-name=ber\xc0\n", "train.sh:2: not valid UTF-8 (byte 0xC0)");
  ExpectRefused("#!/bin/bash\n", "command line: not valid UTF-8", {"-J", "x\xff"});
}

TEST(SbatchTest, OptionsThatTakeTheNextWord) {
  EXPECT_TRUE(SbatchOptionTakesNextWord("-t"));
  EXPECT_TRUE(SbatchOptionTakesNextWord("--time"));
  EXPECT_FALSE(SbatchOptionTakesNextWord("--time=5"));
  EXPECT_FALSE(SbatchOptionTakesNextWord("-t5"));
  EXPECT_FALSE(SbatchOptionTakesNextWord("--parsable"));
  EXPECT_FALSE(SbatchOptionTakesNextWord("--no-such-option"));
  EXPECT_FALSE(SbatchOptionTakesNextWord("train.sh"));
}

}  // namespace
}  // namespace tide::api
