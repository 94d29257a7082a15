"""`gpu-doctor launch --canary K` across two Slurm nodes (one srun step; both slurmds on this machine)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_cluster import LocalSlurm, free_port
from slurm_util import PYTHON, job_env, local_slurm, write_exec

from doctor.canary.launch import EXIT_CANARY

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.slurm]

JOB = Path(__file__).resolve().parent / "fixtures" / "canary" / "ddp_train.py"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    with local_slurm(tmp_path_factory.mktemp("slurm"), nodes=2, cpus=2) as cluster:
        yield cluster


def test_the_canary_names_the_rank_and_its_node_across_two_nodes(slurm: LocalSlurm, tmp_path: Path) -> None:
    shutil.copy(JOB, tmp_path / "ddp_train.py")
    run_dir = tmp_path / "run"
    script = write_exec(tmp_path / "launch.sbatch", f"""#!/bin/sh
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
exec {PYTHON} -m doctor launch --plain --quiet --no-warmup --master-port {free_port()} --run-dir {run_dir} \\
    --canary 5 -- ddp_train.py --steps 12 --flip-rank 1 --flip-after 7 --os-exit
""")
    job = slurm.sbatch(script, f"--output={tmp_path}/slurm-%j.out", f"--chdir={tmp_path}", env=job_env())

    state = slurm.wait_job(job, timeout=240)
    out = (tmp_path / f"slurm-{job}.out").read_text()
    first, second = slurm.run("scontrol", "show", "hostnames", slurm.job_field(job, "NodeList")).stdout.split()
    line = "step 10: no majority: rank 1's `layer3.weight` differs from rank 0"
    assert state == "FAILED" and f"gpu-doctor:   canary: {line}\n" in out, out      # exit 3: FAILED
    assert f"exit code {EXIT_CANARY})" in out
    doc = json.loads((run_dir / "canary.json").read_text())
    assert doc["first_mismatch"]["line"] == line
    assert {r: v["host"] for r, v in doc["ranks"].items()} == {"0": first, "1": second}
