#!/bin/bash
#SBATCH --job-name=bert
#SBATCH --partition=gpu
#SBATCH --gres=gpu:A100:2
#SBATCH --nodes=2
#SBATCH --cpus-per-task=8
#SBATCH --mem=64G
#SBATCH --time=1-02:30:00
python train.py
