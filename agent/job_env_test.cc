// The job's directories and environment (job_env.h): pure functions.
#include "agent/job_env.h"

#include <gtest/gtest.h>

#include "agent/runtime/process_runtime.h"

namespace tide::agent {
namespace {

std::vector<api::Gpu> FourGpus() {
  std::vector<api::Gpu> gpus(4);
  for (int i = 0; i < 4; ++i) {
    gpus[i].index = i;
    gpus[i].uuid = "GPU-" + std::to_string(i);
  }
  return gpus;
}

TEST(PathsFor, LaysOutTheAttempt) {
  JobPaths p = PathsFor("/d", "j-1", 2);
  EXPECT_EQ(p.root, "/d/jobs/j-1/2");
  EXPECT_EQ(p.work, "/d/jobs/j-1/2/work");
  EXPECT_EQ(p.output, "/d/jobs/j-1/2/output");
  EXPECT_EQ(p.checkpoint, "/d/jobs/j-1/2/checkpoint");
  EXPECT_EQ(p.notice, "/d/jobs/j-1/2/control/notice");
  EXPECT_EQ(p.metrics, "/d/jobs/j-1/2/metrics.jsonl");
  EXPECT_EQ(p.log, "/d/jobs/j-1/2/log");
}

TEST(BuildJobEnv, SaysWhereTheNodeIsInTheJob) {
  api::Job job;
  job.id = "j-1";
  job.attempt = 2;
  job.gpus = {1, 3};
  job.spec.env = {{"WORLD_SIZE", "7"}, {"MINE", "x"}};
  std::vector<api::Gpu> gpus = FourGpus();
  JobPaths paths = PathsFor("/d", job.id, job.attempt);
  auto single = BuildJobEnv(job, {}, paths, gpus);
  EXPECT_EQ(single["CUDA_VISIBLE_DEVICES"], "1,3");
  EXPECT_EQ(single["TIDE_GPU_UUIDS"], "GPU-1,GPU-3");
  EXPECT_EQ(single["TIDE_NODE_RANK"], "0");
  EXPECT_EQ(single["TIDE_NNODES"], "1");
  EXPECT_EQ(single["WORLD_SIZE"], "7");  // single-node: the spec's own, if any
  EXPECT_EQ(single["MINE"], "x");
  EXPECT_EQ(single.count("MASTER_ADDR"), 0u);

  auto rank = BuildJobEnv(job, {2, 4, "10.0.0.5", 29517}, paths, gpus);
  EXPECT_EQ(rank["TIDE_NODE_RANK"], "2");
  EXPECT_EQ(rank["TIDE_NNODES"], "4");
  EXPECT_EQ(rank["TIDE_GPUS_PER_NODE"], "2");
  EXPECT_EQ(rank["WORLD_SIZE"], "8");  // a gang: Tide's, the rendezvous's truth
  EXPECT_EQ(rank["MASTER_ADDR"], "10.0.0.5");
  EXPECT_EQ(rank["MASTER_PORT"], "29517");
}

TEST(BuildJobEnv, TheAgentsVariablesWinOverTheSpecs) {
  api::Job job;
  job.id = "j-2";
  job.attempt = 1;
  job.spec.env = {{"TIDE_JOB_ID", "spoofed"}, {"CUDA_VISIBLE_DEVICES", "0,1,2,3"}};
  job.spec.secrets = {{"HF_TOKEN", "hf_abc"}, {"TIDE_ATTEMPT", "spoofed"}};
  JobPaths paths = PathsFor("/d", job.id, job.attempt);
  auto env = BuildJobEnv(job, {}, paths, FourGpus());
  EXPECT_EQ(env["HF_TOKEN"], "hf_abc") << "secrets are environment like env";
  EXPECT_EQ(env["TIDE_JOB_ID"], "j-2");
  EXPECT_EQ(env["TIDE_ATTEMPT"], "1");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "");
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES"], "void");  // no GPUs: none, not all
  EXPECT_EQ(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
  EXPECT_EQ(env["TIDE_OUTPUT_DIR"], paths.output);
  EXPECT_EQ(env["TIDE_CHECKPOINT_DIR"], paths.checkpoint);
  EXPECT_EQ(env["TIDE_NOTICE_FILE"], paths.notice);
  EXPECT_EQ(env["TIDE_METRICS_FILE"], paths.metrics);
  EXPECT_EQ(env.count("TIDE_RESUMED"), 0u);
  EXPECT_EQ(env.count("SLURM_JOB_ID"), 0u);
}

TEST(BuildJobEnv, AResumedAttemptSaysWhyThePreviousOneEnded) {
  api::Job job;
  job.id = "j-3";
  job.attempt = 3;
  api::Attempt first, second;
  first.attempt = 1;
  first.reason = "node_lost";
  second.attempt = 2;
  second.reason = "preempted";
  job.attempts = {first, second};
  auto env = BuildJobEnv(job, {}, PathsFor("/d", job.id, job.attempt), {});
  EXPECT_EQ(env["TIDE_RESUMED"], "1");
  EXPECT_EQ(env["TIDE_RESTART_REASON"], "preempted");
}

TEST(BuildJobEnv, ATrialGetsItsBatchAndParameters) {
  api::Job job;
  job.id = "j-4";
  job.batch = "b-1";
  job.trial = "run-007";
  job.params = {{"lr", "0.001"}, {"batch-size", "16"}};
  auto env = BuildJobEnv(job, {}, PathsFor("/d", job.id, 1), {});
  EXPECT_EQ(env["TIDE_BATCH"], "b-1");
  EXPECT_EQ(env["TIDE_TRIAL"], "run-007");
  EXPECT_EQ(env["TIDE_PARAM_LR"], "0.001");
  EXPECT_EQ(env["TIDE_PARAM_BATCH_SIZE"], "16");
  EXPECT_EQ(ParamVariable("a.b c"), "TIDE_PARAM_A_B_C");
}

TEST(BuildJobEnv, SlurmScriptsGetTheirVariablesUnlessTheSpecSetsThem) {
  api::Job job;
  job.id = "j-5";
  job.attempt = 2;
  job.gpus = {0, 2};
  job.spec.name = "train.sh";
  job.spec.slurm = true;
  job.spec.resources.cpus = 2.5;
  job.spec.resources.memory_mb = 4096;
  job.spec.env = {{"SLURM_ARRAY_TASK_ID", "7"}, {"SLURM_JOB_NAME", "mine"}};
  JobPaths paths = PathsFor("/d", job.id, job.attempt);
  auto env = BuildJobEnv(job, {1, 2, "10.0.0.5", 29500}, paths, FourGpus(), "gpu-node-1");
  EXPECT_EQ(env["SLURM_JOB_ID"], "j-5");
  EXPECT_EQ(env["SLURM_JOBID"], "j-5");
  EXPECT_EQ(env["SLURM_JOB_NAME"], "mine");  // the spec's
  EXPECT_EQ(env["SLURM_ARRAY_TASK_ID"], "7");
  EXPECT_EQ(env["SLURM_NNODES"], "2");
  EXPECT_EQ(env["SLURM_NODEID"], "1");
  EXPECT_EQ(env["SLURM_PROCID"], "1");
  EXPECT_EQ(env["SLURM_NTASKS"], "2");
  EXPECT_EQ(env["SLURM_GPUS_ON_NODE"], "2");
  EXPECT_EQ(env["SLURM_JOB_GPUS"], "0,2");
  EXPECT_EQ(env["SLURM_CPUS_PER_TASK"], "3");  // rounded up
  EXPECT_EQ(env["SLURM_MEM_PER_NODE"], "4096");
  EXPECT_EQ(env["SLURM_SUBMIT_DIR"], paths.work);
  EXPECT_EQ(env["SLURM_RESTART_COUNT"], "1");
  EXPECT_EQ(env["SLURM_CLUSTER_NAME"], "tide");
  EXPECT_EQ(env["SLURMD_NODENAME"], "gpu-node-1");
  EXPECT_EQ(paths.bin, "/d/jobs/j-5/2/control/bin");
  EXPECT_EQ(env["PATH"], paths.bin + ":" + kDefaultPath) << "srun first";

  job.spec.env["PATH"] = "/opt/conda/bin:/usr/bin";
  EXPECT_EQ(BuildJobEnv(job, {}, paths, FourGpus())["PATH"], paths.bin + ":/opt/conda/bin:/usr/bin");
  job.spec.slurm = false;
  EXPECT_EQ(BuildJobEnv(job, {}, paths, FourGpus())["PATH"], "/opt/conda/bin:/usr/bin");
  job.spec.slurm = true;
  job.spec.env.erase("PATH");

  job.spec.resources = {};
  auto bare = BuildJobEnv(job, {}, paths, FourGpus());
  EXPECT_EQ(bare["SLURM_CPUS_PER_TASK"], "1");
  EXPECT_EQ(bare.count("SLURM_MEM_PER_NODE"), 0u);
  EXPECT_EQ(bare.count("SLURMD_NODENAME"), 0u);
}

}  // namespace
}  // namespace tide::agent
