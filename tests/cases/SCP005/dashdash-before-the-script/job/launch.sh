#!/bin/bash
SCOREP_FLAGS="--cuda --thread=pthread"
export SCOREP_ENABLE_TRACING=true
python -m scorep $SCOREP_FLAGS -- train.py "$@"
