// Where one attempt of a job lives on this node, and the environment it
// runs with. Pure functions of the assignment and the node: no I/O.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "api/types.h"

namespace tide::agent {

// Where one attempt lives: DATA_DIR/jobs/<id>/<attempt>/.
struct JobPaths {
  std::string root;
  std::string work;        // cwd of the job, code unpacked here
  std::string output;      // TIDE_OUTPUT_DIR: uploaded when the job ends
  std::string checkpoint;  // TIDE_CHECKPOINT_DIR
  std::string control;     // the agent's, read-only to the job: holds the notice
  std::string notice;      // TIDE_NOTICE_FILE: written before SIGTERM
  std::string bin;         // the agent's programs for the job (srun), first on a Slurm job's PATH
  std::string metrics;     // TIDE_METRICS_FILE: JSON lines the job appends
  std::string log;         // stdout+stderr, as shipped
};
JobPaths PathsFor(const std::string& data_dir, const std::string& job_id, int attempt);

// The job's environment: spec.env, then the agent's variables (which win):
// CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, NVIDIA_VISIBLE_DEVICES,
// TIDE_GPU_UUIDS, TIDE_JOB_ID, TIDE_ATTEMPT, TIDE_OUTPUT_DIR,
// TIDE_CHECKPOINT_DIR, TIDE_NOTICE_FILE, TIDE_METRICS_FILE, TIDE_RESUMED=1
// on attempts after the first (with TIDE_RESTART_REASON, why the previous
// one ended), a batch trial's TIDE_BATCH, TIDE_TRIAL and TIDE_PARAM_<NAME>,
// and where this node is in the job: TIDE_NODE_RANK, TIDE_NNODES,
// TIDE_GPUS_PER_NODE, and for a gang WORLD_SIZE (all GPUs of the job),
// MASTER_ADDR and MASTER_PORT (rank 0's rendezvous), so `torchrun` needs no
// other setup. With spec.slurm also the SLURM_* variables of a batch
// script (docs/slurm.md), and `bin` (where srun is) first on PATH.
// The variable a batch trial's parameter arrives in: "lr" -> TIDE_PARAM_LR,
// "batch-size" -> TIDE_PARAM_BATCH_SIZE.
std::string ParamVariable(const std::string& name);

std::map<std::string, std::string> BuildJobEnv(const api::Job& job, const api::Gang& gang,
                                               const JobPaths& paths,
                                               const std::vector<api::Gpu>& node_gpus,
                                               const std::string& node_name = "");

}  // namespace tide::agent
