#!응응응sh
#SBATCH --job-name=ber�#!/bin/"!/bin/b-sh응
#SBATC�