"""Slurm integration: the Prolog wrapper (`prolog.sh`) shipped as package data."""

from pathlib import Path

PROLOG_SCRIPT = Path(__file__).with_name("prolog.sh")
