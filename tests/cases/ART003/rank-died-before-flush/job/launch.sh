#!/bin/bash
export SCOREP_CUDA_ENABLE=kernel
export MASTER_ADDR=localhost MASTER_PORT=29500 WORLD_SIZE=2
for r in 0 1; do
    RANK=$r LOCAL_RANK=$r SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$r python -m scorep --cuda ddp.py &
done
wait
