#!/bin/bash
python -m scorep --cuda overlap.py
