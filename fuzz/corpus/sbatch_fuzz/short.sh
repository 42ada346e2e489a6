#!/bin/bash
#SBATCH -J bert -p gpu --gres=gpu:A100:2 -N2 -c8 --mem=65536 --time 1590
