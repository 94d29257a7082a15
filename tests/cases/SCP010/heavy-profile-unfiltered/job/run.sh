#!/bin/bash
# Profile run of the gloo job before the diagnostic trace: one python -m scorep per rank (CPU node).
set -euo pipefail
cd "$(dirname "$0")"
export SCOREP_ENABLE_PROFILING=true
export SCOREP_ENABLE_TRACING=false
export SCOREP_TOTAL_MEMORY=512M
mkdir -p logs
for RANK in 0 1; do
    RANK=$RANK LOCAL_RANK=$RANK WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29433 \
        SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$RANK python -m scorep --thread=pthread train.py --steps 3 \
        > logs/rank_$RANK.log 2>&1 &
done
wait
