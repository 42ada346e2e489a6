// srun for the jobs of `tide sbatch`: a bash script (agent/srun.sh, built
// into the binary) that the agent writes into a Slurm job's control
// directory (JobPaths::bin) and puts first on its PATH (job_env.h). What
// it does is documented in the script and in docs/slurm.md.
#pragma once

#include <string>

namespace tide::agent {

// The text of agent/srun.sh.
const std::string& SrunScript();

}  // namespace tide::agent
