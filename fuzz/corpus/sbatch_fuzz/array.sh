#!/bin/bash
#SBATCH --array=0-15:4%2
#SBATCH --output=out-%A_%a.txt
#SBATCH --gpus=1
echo $SLURM_ARRAY_TASK_ID
