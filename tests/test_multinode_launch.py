"""`gpu-doctor launch` across nodes of a real 3-node Slurm cluster (tests/multinode_cluster.py).

Every node is its own network namespace with its own address (10.213.0.11-13) and hostname:
MASTER_ADDR=localhost cannot work by accident here. The ranks are CPU `gloo` DDP processes
under the Score-P stand-in (tests/fake_scorep), which creates each rank's experiment folder.
A fresh cluster per test; after each, no process, namespace or bridge of it may be left.

Node names do not resolve here (no /etc/hosts entry, no DNS), so gloo left alone binds every
rank to 127.0.0.1 and the ranks on node2 never reach node1: the jobs set no GLOO_SOCKET_IFNAME,
gpu-doctor launch must find each node's interface itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_util import fake_scorep_env
from multinode_cluster import IFNAME, MultiNodeSlurm, node_address, three_nodes
from slurm_util import DDP_JOB, PYTHON, job_env, write_exec

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.multinode]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MultiNodeSlurm]:
    with three_nodes(tmp_path / "slurm") as c:
        yield c


def launch_job(folder: Path, launch_args: str, nodes: int = 2, per_node: int = 2) -> Path:
    """A job folder whose sbatch script runs `gpu-doctor launch` over `nodes` nodes."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.py").write_text(DDP_JOB)
    return write_exec(folder / "launch.sbatch", f"""#!/bin/bash
#SBATCH --job-name=ddp-2n
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node={per_node}
exec {PYTHON} -m doctor launch --plain {launch_args} --run-dir "$PWD/run" -- job.py --steps 2
""")


def submit(cluster: MultiNodeSlurm, folder: Path, script: Path, env: dict[str, str] | None = None) -> str:
    return cluster.sbatch(script, f"--output={folder}/slurm-%j.out", f"--chdir={folder}",
                          env=env or job_env(fake_scorep_env(folder, job_env())))


def test_launch_over_two_nodes_uses_the_first_nodes_address_and_a_folder_per_rank(
        cluster: MultiNodeSlurm, tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    script = launch_job(job_dir, "--no-warmup --instrument scorep --scorep-flags=--thread=pthread")
    job = submit(cluster, job_dir, script)

    state = cluster.wait_job(job, timeout=180)
    out = (job_dir / f"slurm-{job}.out").read_text()
    assert state == "COMPLETED", out
    first, second = cluster.nodes_of(job)
    master = node_address(first)
    assert master != "127.0.0.1"
    plan = json.loads((job_dir / "run" / "launch.json").read_text())
    assert plan["master"].startswith(f"{master}:")
    [step] = plan["processes"]
    assert "--nodes=2" in step["argv"] and "--ntasks-per-node=2" in step["argv"]
    port = plan["master"].split(":")[1]
    # Per-rank logs for all ranks, on both nodes; every rank found the first node's address.
    for rank, node, local in ((0, first, 0), (1, first, 1), (2, second, 0), (3, second, 1)):
        log = (job_dir / "run" / f"rank_{rank}.log").read_text()
        assert re.search(rf"^rank {rank} of 4 on node {node} procid {rank} local {local} "
                         rf"master {master}:{port}$", log, re.M), log
        assert "all_reduce 10" in log and f"rank {rank} done" in log
        assert f"fake scorep: measuring job.py into scorep_rank_{rank}" in log
    # Live status for every rank, with its node.
    for rank, node in ((0, first), (1, first), (2, second), (3, second)):
        assert re.search(rf"^gpu-doctor:   rank {rank} +{node} +done +exit code 0 ", out, re.M), out
    assert "all 4 ranks finished with exit code 0" in out
    # One experiment folder per rank in the shared job folder: no collision across nodes.
    records = [json.loads(p.read_text()) for p in (job_dir / "scorep_records").iterdir()]
    assert sorted(r["env"]["SCOREP_EXPERIMENT_DIRECTORY"] for r in records) == \
        [f"scorep_rank_{r}" for r in range(4)]
    assert "File does already exist" not in out
    # The socket interface: said in the plan, found per node from its route to node1, set for every rank.
    assert (f"socket interface: GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME set per node to the interface of "
            f"its route to {master}") in out, out
    assert plan["spec"]["socket_ifname"] == "auto"
    for rank, node in ((0, first), (1, first), (2, second), (3, second)):
        log = (job_dir / "run" / f"rank_{rank}.log").read_text()
        assert f"sockets gloo {IFNAME} nccl {IFNAME}" in log, log
        said = re.search(rf"^gpu-doctor: socket interface for rank {rank} on {node}: {IFNAME} "
                         rf"\(the route to {master} leaves from {node_address(node)}\): "
                         rf"GLOO_SOCKET_IFNAME={IFNAME} NCCL_SOCKET_IFNAME={IFNAME}; without it: "
                         rf"hostname {node} does not resolve: gloo binds to 127\.0\.0\.1 \(its fallback\), "
                         rf"which the other nodes cannot reach; {master} is reached through {IFNAME} "
                         rf"\({node_address(node)}\)$", log, re.M)
        assert said, log
    for rank in range(4):
        assert (job_dir / f"scorep_rank_{rank}" / "MANIFEST.md").exists()


def test_launch_under_salloc_from_outside_the_nodes_reaches_the_first_node(
        cluster: MultiNodeSlurm, tmp_path: Path) -> None:
    """`salloc -N 2 gpu-doctor launch ...` typed on a login node (here: the host, outside every
    node's namespace): the launcher runs there, the ranks on the two nodes. The user's own
    NCCL_SOCKET_IFNAME stays as it is; GLOO_SOCKET_IFNAME, which they did not set, is each
    node's own interface (not the login node's route: the host reaches the nodes via gdmn0)."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "job.py").write_text(DDP_JOB)
    env = job_env({"NCCL_SOCKET_IFNAME": "^docker,lo"})
    proc = cluster.run("salloc", "--nodes=2", "--ntasks-per-node=1", f"--chdir={job_dir}",
                       PYTHON, "-m", "doctor", "launch", "--plain", "--no-warmup", "--workdir", str(job_dir),
                       "--run-dir", str(job_dir / "run"), "--", "job.py", "--steps", "1",
                       check=False, timeout=180, env=env)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    master = node_address("node1")
    assert f"rendezvous {master}:" in proc.stderr
    assert ("socket interface: GLOO_SOCKET_IFNAME set per node to the interface of its route to "
            f"{master} (the job's own NCCL_SOCKET_IFNAME=^docker,lo stays)") in proc.stderr, proc.stderr
    for rank, node in ((0, "node1"), (1, "node2")):
        log = (job_dir / "run" / f"rank_{rank}.log").read_text()
        assert f"rank {rank} of 2 on node {node} procid {rank} local 0 master {master}:" in log, log
        assert f"rank {rank} done" in log
        assert f"sockets gloo {IFNAME} nccl ^docker,lo" in log, log
        assert (f"gpu-doctor: socket interface for rank {rank} on {node}: {IFNAME} (the route to {master} "
                f"leaves from {node_address(node)}): GLOO_SOCKET_IFNAME={IFNAME}; the job's own "
                "NCCL_SOCKET_IFNAME=^docker,lo stays; without it:") in log, log
