#CLI: --gpus=rtx4090:8 -J b --time 30:00
#!/bin/sh
#SBATCH --gpus=4
#SBATCH --nodes=2
