#!/usr/bin/env bash
# Trace kernels and memcopies of a 2-GPU run.
set -e
export SCOREP_ENABLE_TRACING=true
export SCOREP_CUDA_ENABLE=kernel,memcpy
export MASTER_ADDR=localhost MASTER_PORT=29511 WORLD_SIZE=2
for r in 0 1; do
    RANK=$r LOCAL_RANK=$r SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$r \
        python -m scorep --thread=pthread train.py --epochs 1 &
done
wait
