#!/bin/bash
# one python -m scorep per rank, all writing to the same experiment folder
export SCOREP_EXPERIMENT_DIRECTORY=scorep_trace
export SCOREP_ENABLE_TRACING=true
export MASTER_ADDR=127.0.0.1 MASTER_PORT=29400
NPROC=4
for ((i = 0; i < NPROC; i++)); do
    RANK=$i LOCAL_RANK=$i WORLD_SIZE=$NPROC python -m scorep --cuda train.py &
done
wait
