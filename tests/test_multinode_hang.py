"""`gpu-doctor hang --job JOBID` on the 3-node test cluster (tests/multinode_cluster.py): the sampler
runs on every node of the job (`srun --overlap --jobid`), and the rank that diverged on node2 is
named with its node. Real gloo ranks, one per node; rank 1 (node2) sleeps in its data loader.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from multinode_cluster import IFNAME, MultiNodeSlurm, node_address, three_nodes
from slurm_util import PYTHON, REPO, job_env, poll, write_exec

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.multinode]

JOB = Path(__file__).resolve().parent / "hang_jobs" / "train.py"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MultiNodeSlurm]:
    with three_nodes(tmp_path / "slurm") as c:
        yield c


def test_hang_job_samples_every_node_and_names_the_diverged_rank_on_node2(
        cluster: MultiNodeSlurm, tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(JOB, folder / "train.py")
    script = write_exec(folder / "ddp.sbatch", f"""#!/bin/bash
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
export MASTER_ADDR={node_address("node1")} MASTER_PORT=29533 WORLD_SIZE=3 GLOO_SOCKET_IFNAME={IFNAME}
srun --output=rank_%t.log bash -c 'RANK=$SLURM_PROCID exec {PYTHON} train.py --mode loader --steps 200'
""")
    job = cluster.sbatch(script, f"--output={folder}/slurm-%j.out", f"--chdir={folder}", env=job_env())
    try:
        poll(lambda: all((folder / f"rank_{r}.log").exists() and "step 49/" in (folder / f"rank_{r}.log").read_text()
                         for r in (0, 2)), 120, "ranks 0 and 2 to reach step 49")
        assert cluster.nodes_of(job) == ["node1", "node2", "node3"]
        done = cluster.run(PYTHON, "-m", "doctor", "hang", "--job", job, "--json", check=False, timeout=150,
                           env={**job_env(), "PYTHONPATH": str(REPO)})
        assert done.returncode == 0, done.stdout + done.stderr
        doc = json.loads(done.stdout)
        assert doc["diverged_ranks"] == [1], doc["verdict"]
        assert doc["source"] == f"job {job}"
        assert doc["verdict"].startswith("ranks 0, 2 wait in all_reduce (train.py:"), doc["verdict"]
        assert "on node1, node3" in doc["verdict"]
        assert "rank 1 is in DataLoader.__next__ (train.py:" in doc["verdict"] and "on node2)" in doc["verdict"]
        [minor] = [g for g in doc["groups"] if g["ranks"] == [1]]
        assert minor["nodes"] == ["node2"] and minor["moving"] is False
    finally:
        cluster.run("scancel", job, check=False)
        cluster.wait_job(job, timeout=60)
    # The sampler's srun step ended with the command; the job's ranks with scancel.
    assert not [p for n in cluster.nodes for p in cluster.node_pids(n)
                if b"doctor.hang" in Path(f"/proc/{p}/cmdline").read_bytes()]


def test_launch_over_three_nodes_with_stall_names_rank_1_on_node2_and_stops(
        cluster: MultiNodeSlurm, tmp_path: Path) -> None:
    """Under srun the stall watch samples the ranks where they run (the same srun --overlap sampler)."""
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(JOB, folder / "train.py")
    script = write_exec(folder / "launch.sbatch", f"""#!/bin/bash
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
exec {PYTHON} -m doctor launch --plain -q --no-warmup --socket-ifname {IFNAME} --stall 8 --stall-action stop \\
    --run-dir "$PWD/run" -- train.py --mode loader --steps 200
""")
    job = cluster.sbatch(script, f"--output={folder}/slurm-%j.out", f"--chdir={folder}", env=job_env())
    state = cluster.wait_job(job, timeout=180)
    out = (folder / f"slurm-{job}.out").read_text()
    doc = json.loads((folder / "run" / "hang.json").read_text())
    assert doc["diverged_ranks"] == [1], doc["verdict"] + out
    assert "rank 1 is in DataLoader.__next__ (train.py:" in doc["verdict"] and "on node2)" in doc["verdict"]
    assert "stalled 8s: rank 1 diverged (DataLoader)" in out, out
    assert state == "FAILED" and "exit code 3" in out, (state, out)
