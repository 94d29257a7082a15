"""LNC004 on the 3-node cluster: the gate, run on the second node of a 2-node job, finds what
gloo would do there (node2 resolves nowhere: 127.0.0.1) and the interface of node2's real
route to the first node. Nothing of it is given: the probe asks the node itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from multinode_cluster import IFNAME, MultiNodeSlurm, node_address, three_nodes
from slurm_util import PYTHON, REPO, job_env, write_exec

pytestmark = [pytest.mark.slow, pytest.mark.multinode]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MultiNodeSlurm]:
    with three_nodes(tmp_path / "slurm") as c:
        yield c


def test_the_gate_on_node2_says_gloo_would_bind_loopback_and_names_eth0(
        cluster: MultiNodeSlurm, tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "train.py").write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n")
    write_exec(job_dir / "train.sbatch", """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
srun python train.py
""")
    # The gate as a user runs it inside the allocation, on the second node (srun -r 1).
    gate = write_exec(tmp_path / "gate.sbatch", f"""#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
srun --nodes=1 --ntasks=1 --relative=1 env PYTHONPATH={REPO} {PYTHON} -m doctor --check-only --playbook \\
    scorep-ddp --only LNC004 --json-file {tmp_path}/verdict.json --quiet {job_dir}
""")
    out = tmp_path / "gate.out"
    job = cluster.sbatch(gate, f"--output={out}", f"--chdir={tmp_path}", env=job_env())
    cluster.wait_job(job, timeout=120)
    assert (tmp_path / "verdict.json").exists(), out.read_text()
    doc = json.loads((tmp_path / "verdict.json").read_text())
    [check] = [c for c in doc["checks"] if c["id"] == "LNC004"]
    [finding] = check["findings"]
    master = node_address("node1")
    assert finding["status"] == "fail", finding
    assert finding["message"] == (
        f"hostname node2 does not resolve: gloo binds to 127.0.0.1 (its fallback), which the other nodes cannot "
        f"reach; {master} is reached through {IFNAME} ({node_address('node2')}); the job sets neither "
        "GLOO_SOCKET_IFNAME nor NCCL_SOCKET_IFNAME"), finding
    said = {e.get("label"): e.get("text") for e in finding["evidence"]}
    assert said["ip route get"] == f"{master} (the allocation's first node node1) via {IFNAME} src " \
                                   f"{node_address('node2')}", finding
    assert said["getent ahosts"] == "node2 resolves to nothing", finding
