#!/bin/sh
#SBATCH --dependency=afterok:j-1:j-2,afterany:j-3
#SBATCH --mail-type=END
#SBATCH --exclusive
srun hostname
