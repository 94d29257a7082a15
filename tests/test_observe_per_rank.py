"""What differs per rank, as bash ran it: where the observed runs of a launch (one per srun task, one per
loop turn) show a value the static reading has per rank as one value, or one value as per rank, the
observed reading wins; a value that differs only from node to node stays what the static reading says."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from jobfolder_util import run_check, write_job

from doctor.case import Case
from doctor.jobfolder.discover import load_job
from doctor.model import Status
from doctor.observe import sandbox

pytestmark = pytest.mark.skipif(sandbox.kind() is None, reason="neither bubblewrap nor unshare works here")

TRAIN = "import torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\ndist.destroy_process_group()\n"


def test_a_rank_variable_in_a_double_quoted_bash_c_string_is_one_folder_for_every_task(tmp_path: Path) -> None:
    # `${RANK}` inside "..." is expanded by the batch shell, where RANK is not set: every task gets scorep_rank_
    write_job(tmp_path, {"job.sbatch": """
        #!/bin/bash
        #SBATCH --ntasks-per-node=4
        export SCOREP_TOTAL_MEMORY=3500M
        srun bash -c "
            export RANK=\\$SLURM_PROCID
            SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_${RANK} python -m scorep train.py"
        """, "train.py": TRAIN})
    (observed,) = [o for o in run_check("SCP006", tmp_path, options={"observe": True}) if o.status is not Status.SKIP]
    assert observed.status is Status.FAIL, observed.message
    assert "every rank writes SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_:" in observed.message
    job = load_job(Case(root=tmp_path, options={"observe": True}))
    assert any(d["what"] == "env SCOREP_EXPERIMENT_DIRECTORY" and d["static"].startswith("per rank")
               for d in job.differences), job.differences


def test_a_while_read_loops_turns_each_have_their_own_rank(tmp_path: Path) -> None:
    write_job(tmp_path, {"run.sh": """
        #!/bin/bash
        export SCOREP_TOTAL_MEMORY=3500M MASTER_ADDR=127.0.0.1 MASTER_PORT=29400 WORLD_SIZE=2
        while read -r r; do
            RANK=$r SCOREP_EXPERIMENT_DIRECTORY=scorep_$r python -m scorep train.py &
        done < <(seq 0 1)
        wait
        """, "train.py": TRAIN})
    job = load_job(Case(root=tmp_path, options={"observe": True}))
    ((cmd, _launch),) = job.instrumented
    assert cmd.env["SCOREP_EXPERIMENT_DIRECTORY"].varies and cmd.env["RANK"].varies
    assert cmd.var("RANK") in cmd.inline  # the prefix assignment is the one bash ran: remedies edit it there
    [out] = run_check("SCP006", tmp_path, options={"observe": True})
    assert out.status is Status.PASS, out.message


def test_a_folder_named_after_the_node_is_not_read_as_one_per_rank(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sbatch": """
        #!/bin/bash
        #SBATCH --nodes=2
        #SBATCH --ntasks-per-node=2
        export SCOREP_TOTAL_MEMORY=3500M
        srun bash -c 'SCOREP_EXPERIMENT_DIRECTORY=scorep_node$SLURM_NODEID exec python -m scorep train.py'
        """, "train.py": TRAIN})
    job = load_job(Case(root=tmp_path, options={"observe": True}))
    ((cmd, _launch),) = job.instrumented
    assert not cmd.env["SCOREP_EXPERIMENT_DIRECTORY"].varies  # the two tasks of a node share it
    assert not [d for d in job.differences if d["what"] == "env SCOREP_EXPERIMENT_DIRECTORY"], job.differences


def test_the_static_reading_never_takes_gpu_doctors_own_dollar_underscore(tmp_path: Path) -> None:
    # `$_` is bash's last word of the command before; the `_` gpu-doctor was started with is its launcher's path
    write_job(tmp_path, {"job.sh": """
        #!/bin/bash
        mkdir -p "${SCRATCH:-/tmp}/run" && cd "$_"
        export SCOREP_TOTAL_MEMORY=3500M
        python -m scorep train.py
        """, "train.py": TRAIN})
    env = {**os.environ, "_": "/usr/bin/timeout"}
    job = load_job(Case(root=tmp_path, env=env, options={"observe": False}))
    ((cmd, _launch),) = job.instrumented
    assert cmd.cwd != "/usr/bin/timeout"


def test_both_readings_follow_cd_into_the_folder_the_command_before_named(tmp_path: Path) -> None:
    # the observer's own DEBUG trap must leave `$_` as bash had it: `cd "$_"` goes where mkdir made
    write_job(tmp_path, {"job.sh": """
        #!/bin/bash
        mkdir -p runs/exp1 && cd "$_"
        export SCOREP_TOTAL_MEMORY=3500M
        python -m scorep ../../train.py
        """, "train.py": TRAIN})
    for observe in (True, False):
        job = load_job(Case(root=tmp_path, options={"observe": observe}))
        ((cmd, _launch),) = job.instrumented
        assert cmd.cwd == str(tmp_path / "runs" / "exp1"), (observe, cmd.cwd)
    assert not job.differences or all(d["what"] != "cwd" for d in job.differences)


def test_a_value_that_holds_the_sandboxs_job_id_is_known_only_when_the_job_runs(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sbatch": """
        #!/bin/bash
        #SBATCH --ntasks=1
        mkdir -p "/tmp/ddp_$SLURM_JOB_ID" && cd "$_"
        export SCOREP_TOTAL_MEMORY=3500M SCOREP_EXPERIMENT_DIRECTORY=$PWD/profile
        python -m scorep train.py
        """, "train.py": TRAIN})
    job = load_job(Case(root=tmp_path, options={"observe": True}))
    ((cmd, _launch),) = job.instrumented
    folder = cmd.env["SCOREP_EXPERIMENT_DIRECTORY"]
    assert folder.value is None and "4242" not in folder.raw, folder
