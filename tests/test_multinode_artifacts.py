"""ART003 after a launch over two nodes whose ranks measured into node-local scratch.

The job stages its script on every node's scratch (a tmpfs of its own per node, as /scratch
is on a real cluster) and runs the launch there: every rank trains and exits 0, but the
experiment folders of node2's ranks stay on node2's disk. The launcher, on node1, finds only
node1's: ART003 counts the ranks per node and names node2.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_util import fake_scorep_env
from multinode_cluster import MultiNodeSlurm, three_nodes
from slurm_util import DDP_JOB, PYTHON, job_env, write_exec

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.multinode]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MultiNodeSlurm]:
    with three_nodes(tmp_path / "slurm", scratch=tmp_path / "scratch") as c:
        yield c


def test_art003_names_the_node_whose_ranks_left_no_experiment_folder(
        cluster: MultiNodeSlurm, tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "train.py").write_text(DDP_JOB)
    script = write_exec(job_dir / "train.sbatch", f"""#!/bin/bash
#SBATCH --job-name=ddp-scratch
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2

# Stage the run on node-local scratch, once per node: the fast disk.
RUN="$SCRATCH/run-$SLURM_JOB_ID"
srun --ntasks-per-node=1 bash -c "mkdir -p $RUN && cp train.py $RUN/"
{PYTHON} -m doctor launch --plain --no-warmup --instrument scorep --scorep-flags=--thread=pthread \\
    --workdir "$RUN" --run-dir "$PWD/run" -- train.py --steps 2
""")
    env = job_env(fake_scorep_env(job_dir, job_env({"SCRATCH": str(tmp_path / "scratch"),
                                                    "FAKE_SCOREP_PROFILE": "cube"})))
    job = cluster.sbatch(script, f"--output={job_dir}/slurm-%j.out", f"--chdir={job_dir}", env=env)

    state = cluster.wait_job(job, timeout=180)
    out = (job_dir / f"slurm-{job}.out").read_text()
    assert state == "COMPLETED", out
    assert "all 4 ranks finished with exit code 0" in out
    # Every rank was measured (the stand-in recorded each), each into its own folder ...
    records = sorted(p.read_text() for p in (job_dir / "scorep_records").iterdir())
    assert len(records) == 4
    # ... but only node1's folders are where the launcher looks.
    assert "2/4 ranks measured" in out, out
    assert re.search(r"ART003 fail: 2 of 4 ranks left a complete measurement; missing or incomplete: "
                     r"rank 2, rank 3; no experiment folder from any rank on node2 \(ranks 2, 3\)", out), out
    assert "node1" not in out.split("ART003 fail:")[1].splitlines()[0]
