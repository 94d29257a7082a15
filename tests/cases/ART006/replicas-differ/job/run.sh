#!/bin/bash
#SBATCH --nodes=1 --gpus-per-node=4
gpu-doctor launch --nproc 4 --canary 10 --run-dir logs -- train.py
