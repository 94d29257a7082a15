#!/bin/bash
python -m scorep --cuda train_ddp.py
