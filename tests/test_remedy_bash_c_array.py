"""A one-line `srun bash -c "..."` with `\\$` escapes and a `${ARGS[*]}` array joined into the string:
per-rank-dirs edits inside the string at the command's start (the array's joins have no place of their
own in the file), the mkdir line goes on a line of its own unescaped, and every remedy verifies."""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor.cli import main

JOB = r'''#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
set -euo pipefail
RUNDIR=/scratch/$USER/llama_${SLURM_JOB_ID}
export SCOREP_EXPERIMENT_DIRECTORY=$RUNDIR/trace
export SCOREP_TOTAL_MEMORY=3500M
export SCOREP_CUDA_BUFFER=64M
ARGS=(--epochs 1 --lr 3e-4)
srun --cpu-bind=none bash -c "RANK=\$SLURM_PROCID WORLD_SIZE=\$SLURM_NTASKS python -m scorep --cuda finetune.py ${ARGS[*]}"
'''

TRAIN = """import torch
import torch.distributed as dist

dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1).cuda())
dist.destroy_process_group()
"""


def test_per_rank_dirs_edits_inside_a_one_line_double_quoted_bash_c_with_an_array(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.sbatch").write_text(JOB)
    (job / "finetune.py").write_text(TRAIN)
    main(["fix", str(job), "--apply", "--unsafe"])
    said = "".join(capsys.readouterr())
    assert "scorep-per-rank-dirs: verified" in said and "NOT verified" not in said and "not verified" not in said, said
    fixed = (job / "train.sbatch").read_text().splitlines()
    assert 'mkdir -p "$SCOREP_EXPERIMENT_DIRECTORY"' in fixed, fixed
    assert fixed[-1] == ('srun --cpu-bind=none bash -c "SCOREP_EXPERIMENT_DIRECTORY=\\${SCOREP_EXPERIMENT_DIRECTORY}/'
                         'scorep_rank_\\$SLURM_PROCID RANK=\\$SLURM_PROCID WORLD_SIZE=\\$SLURM_NTASKS python -m scorep '
                         '--cuda finetune.py ${ARGS[*]}"'), fixed[-1]
