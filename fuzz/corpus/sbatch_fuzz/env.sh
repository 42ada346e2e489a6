#!/bin/bash
#SBATCH --export=ALL,FOO=bar
#SBATCH --mem-per-gpu=20G
#SBATCH --gpus-per-node=2
#SBATCH --error=err-%j.txt
#SBATCH --parsable
