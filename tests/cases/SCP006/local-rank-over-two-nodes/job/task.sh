#!/bin/bash
# one srun task: its folder named after its GPU on the node
export SCOREP_EXPERIMENT_DIRECTORY=scorep_gpu_${SLURM_LOCALID}
exec python -m scorep --cuda train.py
