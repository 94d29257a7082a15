#!/bin/bash
python -m scorep --cuda finetune.py --epochs 2
