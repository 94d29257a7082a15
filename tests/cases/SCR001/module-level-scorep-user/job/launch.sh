#!/bin/bash
# trace the CUDA side of both ranks; the user regions come from regions.py
export SCOREP_CUDA_ENABLE=kernel,memcpy
export SCOREP_ENABLE_TRACING=true
torchrun --nproc_per_node=2 main.py --config cfg.yaml
