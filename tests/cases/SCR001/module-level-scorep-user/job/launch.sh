#!/bin/bash
torchrun --nproc_per_node=2 main.py --config cfg.yaml
