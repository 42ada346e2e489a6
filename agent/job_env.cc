#include "agent/job_env.h"

#include <cctype>
#include <cmath>

#include "agent/runtime/process_runtime.h"

namespace tide::agent {

JobPaths PathsFor(const std::string& data_dir, const std::string& job_id, int attempt) {
  JobPaths p;
  p.root = data_dir + "/jobs/" + job_id + "/" + std::to_string(attempt);
  p.work = p.root + "/work";
  p.output = p.root + "/output";
  p.checkpoint = p.root + "/checkpoint";
  // The agent writes the notice; the job may only read it.
  p.control = p.root + "/control";
  p.notice = p.control + "/notice";
  p.bin = p.control + "/bin";
  p.metrics = p.root + "/metrics.jsonl";
  p.log = p.root + "/log";
  return p;
}

namespace {

using Env = std::map<std::string, std::string>;

// "1,3": the job's GPU indices on this node.
std::string GpuIndices(const api::Job& job) {
  std::string indices;
  for (int index : job.gpus) indices += (indices.empty() ? "" : ",") + std::to_string(index);
  return indices;
}

void AddGpuVars(const api::Job& job, const std::vector<api::Gpu>& node_gpus, Env* env) {
  const std::string indices = GpuIndices(job);
  std::string uuids;
  for (int index : job.gpus) {
    for (const api::Gpu& g : node_gpus) {
      if (g.index == index) uuids += (uuids.empty() ? "" : ",") + g.uuid;
    }
  }
  (*env)["CUDA_VISIBLE_DEVICES"] = indices;
  (*env)["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  (*env)["NVIDIA_VISIBLE_DEVICES"] = indices.empty() ? "void" : indices;
  (*env)["TIDE_GPU_UUIDS"] = uuids;
}

void AddTideVars(const api::Job& job, const JobPaths& paths, Env* env) {
  (*env)["TIDE_JOB_ID"] = job.id;
  (*env)["TIDE_ATTEMPT"] = std::to_string(job.attempt);
  (*env)["TIDE_OUTPUT_DIR"] = paths.output;
  (*env)["TIDE_CHECKPOINT_DIR"] = paths.checkpoint;
  (*env)["TIDE_NOTICE_FILE"] = paths.notice;
  (*env)["TIDE_METRICS_FILE"] = paths.metrics;
  if (job.attempt > 1) {
    (*env)["TIDE_RESUMED"] = "1";
    for (const api::Attempt& a : job.attempts) {
      if (a.attempt == job.attempt - 1) (*env)["TIDE_RESTART_REASON"] = a.reason;
    }
  }
  if (!job.batch.empty()) {
    (*env)["TIDE_BATCH"] = job.batch;
    (*env)["TIDE_TRIAL"] = job.trial;
    for (const auto& [name, value] : job.params) (*env)[ParamVariable(name)] = value;
  }
}

void AddGangVars(const api::Job& job, const api::Gang& gang, Env* env) {
  const int per_node = static_cast<int>(job.gpus.size());
  (*env)["TIDE_NODE_RANK"] = std::to_string(gang.rank);
  (*env)["TIDE_NNODES"] = std::to_string(gang.nnodes);
  (*env)["TIDE_GPUS_PER_NODE"] = std::to_string(per_node);
  if (gang.nnodes > 1) {
    // Only for a gang: single-node scripts read WORLD_SIZE > 1 as "I was
    // launched distributed", and a spec's own value stays theirs.
    (*env)["WORLD_SIZE"] = std::to_string(gang.nnodes * per_node);
    (*env)["MASTER_ADDR"] = gang.master_addr;
    (*env)["MASTER_PORT"] = std::to_string(gang.master_port);
  }
}

// What sbatch's scripts read; a value the spec set (the array task id, ...)
// is the spec's. See docs/slurm.md.
void AddSlurmVars(const api::Job& job, const api::Gang& gang, const JobPaths& paths,
                  const std::string& node_name, Env* env) {
  auto set = [&](const std::string& k, const std::string& v) { env->emplace(k, v); };
  const api::Resources& res = job.spec.resources;
  set("SLURM_JOB_ID", job.id);
  set("SLURM_JOBID", job.id);
  set("SLURM_JOB_NAME", job.spec.name);
  set("SLURM_NNODES", std::to_string(gang.nnodes));
  set("SLURM_JOB_NUM_NODES", std::to_string(gang.nnodes));
  set("SLURM_NODEID", std::to_string(gang.rank));
  set("SLURM_PROCID", std::to_string(gang.rank));
  set("SLURM_NTASKS", std::to_string(gang.nnodes));
  set("SLURM_LOCALID", "0");
  set("SLURM_GPUS_ON_NODE", std::to_string(job.gpus.size()));
  set("SLURM_JOB_GPUS", GpuIndices(job));
  set("SLURM_CPUS_PER_TASK",
      std::to_string(res.cpus > 0 ? static_cast<int64_t>(std::ceil(res.cpus)) : 1));
  if (res.memory_mb > 0) set("SLURM_MEM_PER_NODE", std::to_string(res.memory_mb));
  set("SLURM_SUBMIT_DIR", paths.work);
  set("SLURM_RESTART_COUNT", std::to_string(job.attempt - 1));
  set("SLURM_CLUSTER_NAME", "tide");
  if (!node_name.empty()) set("SLURMD_NODENAME", node_name);
  // srun (agent/srun.sh) before any other, the host's included.
  auto path = env->find("PATH");
  const std::string rest = path == env->end() ? kDefaultPath : path->second;
  (*env)["PATH"] = paths.bin + ":" + rest;
}

}  // namespace

std::string ParamVariable(const std::string& name) {
  std::string var = "TIDE_PARAM_";
  for (char c : name) {
    var += std::isalnum(static_cast<unsigned char>(c))
               ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
               : '_';
  }
  return var;
}

std::map<std::string, std::string> BuildJobEnv(const api::Job& job, const api::Gang& gang,
                                               const JobPaths& paths,
                                               const std::vector<api::Gpu>& node_gpus,
                                               const std::string& node_name) {
  Env env = job.spec.env;
  for (const auto& [name, value] : job.spec.secrets) env[name] = value;
  AddGpuVars(job, node_gpus, &env);
  AddTideVars(job, paths, &env);
  AddGangVars(job, gang, &env);
  if (job.spec.slurm) AddSlurmVars(job, gang, paths, node_name, &env);
  return env;
}

}  // namespace tide::agent
