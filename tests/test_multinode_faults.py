"""What breaks across nodes, on the 3-node cluster: a node's ranks lost mid-run, a node's
slurmd killed mid-run, and a rendezvous port that a firewall on one node blocks (DROP: no
answer; REJECT: refused). Real gloo DDP ranks, real srun.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from multinode_cluster import MultiNodeSlurm, node_address, three_nodes
from slurm_cluster import free_port
from slurm_util import PYTHON, job_env, poll, write_exec

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.multinode]

# A gloo DDP job that trains until told to stop. When a peer dies, gloo raises at the next
# collective; NCCL would block there until its timeout instead: the job does the NCCL thing
# (waits), so that only the launcher's --grace can end the survivors.
LONG_DDP = r'''
import os, sys, threading, time
import torch
import torch.distributed as dist
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
print(f"rank {rank} on {os.environ.get('SLURMD_NODENAME')} pid {os.getpid()} training", flush=True)
try:
    for step in range(1, 100000):
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}", flush=True)
        time.sleep(0.1)
except RuntimeError as exc:
    print(f"rank {rank}: collective failed: {str(exc)[:120]}; waiting for the lost peers", flush=True)
    threading.Event().wait()
'''


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MultiNodeSlurm]:
    with three_nodes(tmp_path / "slurm") as c:
        yield c


def job_folder(folder: Path, per_node: int, launch_args: str, directives: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(LONG_DDP)
    return write_exec(folder / "ddp.sbatch", f"""#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node={per_node}
{directives}exec {PYTHON} -m doctor launch --plain --no-warmup {launch_args} --run-dir "$PWD/run" -- train.py
""")


def rank_pids(cluster: MultiNodeSlurm, node: str) -> list[int]:
    """The training processes on `node` (not the srun task that watches them)."""
    found = []
    for pid in cluster.node_pids(node):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"train.py" in argv and b"doctor.launch.srun_task" not in argv:
            found.append(pid)
    return found


def only_slurmd_left(cluster: MultiNodeSlurm) -> dict[str, list[str]]:
    """Per node, every process in it other than its slurmd."""
    left: dict[str, list[str]] = {}
    for node in cluster.nodes:
        for pid in cluster.node_pids(node):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                zombie = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
            except OSError:
                continue
            if not argv.startswith("/usr/sbin/slurmd ") and not zombie:
                left.setdefault(node, []).append(f"{pid} {argv[:100]}")
    return left


def test_losing_a_nodes_ranks_names_the_node_stops_the_rest_within_grace_and_exits_137(
        cluster: MultiNodeSlurm, tmp_path: Path) -> None:
    folder = tmp_path / "job"
    script = job_folder(folder, 2, "--grace 3 --kill-after 2 --socket-ifname eth0")
    job = cluster.sbatch(script, f"--output={folder}/slurm-%j.out", f"--chdir={folder}", env=job_env())
    poll(lambda: all((folder / "run" / f"rank_{r}.log").exists() and
                     "step 3" in (folder / "run" / f"rank_{r}.log").read_text() for r in range(4)),
         120, "every rank to train")
    lost = rank_pids(cluster, "node2")
    assert len(lost) == 2, lost
    for pid in lost:
        os.kill(pid, signal.SIGKILL)   # node2's ranks die at once, as when the node goes away
    killed_at = time.monotonic()

    state = cluster.wait_job(job, timeout=60)
    ended_after = time.monotonic() - killed_at
    out = (folder / f"slurm-{job}.out").read_text()
    assert state == "FAILED", out
    assert cluster.job_field(job, "ExitCode") == "137:0", out      # the failing rank's code: SIGKILL
    assert re.search(r"rank [23] on node2 failed first \(killed by SIGKILL\); lost node2: ranks 2, 3; "
                     r"stopped ranks 0, 1 after the 3 s grace", out), out
    assert re.search(r"^gpu-doctor:   rank 0 +node1 +killed ", out, re.M), out
    # --socket-ifname names the interface instead of the route: in the plan, and for every rank.
    assert "socket interface: GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME=eth0 on every node (--socket-ifname)" in out
    assert "gpu-doctor: socket interface for rank 3 on node2: eth0 (--socket-ifname): GLOO_SOCKET_IFNAME=eth0 " \
        "NCCL_SOCKET_IFNAME=eth0" in (folder / "run" / "rank_3.log").read_text()
    # grace 3 s + SIGTERM: the survivors end by SIGTERM, so well within grace + kill-after.
    assert ended_after < 3 + 2 + 5, (ended_after, out)
    assert "collective failed" in (folder / "run" / "rank_0.log").read_text()
    poll(lambda: not only_slurmd_left(cluster), 15, f"every node to be empty: {only_slurmd_left(cluster)}")


def test_a_rendezvous_port_blocked_on_one_node_names_the_rank_and_exits_124(
        cluster: MultiNodeSlurm, tmp_path: Path) -> None:
    port = free_port()
    # node2's firewall drops what it sends to the port (node1, where rank 0 listens, is fine).
    cluster.in_node("node2", "iptables", "-A", "OUTPUT", "-p", "tcp", "--dport", str(port), "-j", "DROP")
    folder = tmp_path / "job"
    script = job_folder(folder, 1, f"--master-port {port} --rendezvous-timeout 8")
    started = time.monotonic()
    job = cluster.sbatch(script, f"--output={folder}/slurm-%j.out", f"--chdir={folder}", env=job_env())
    state = cluster.wait_job(job, timeout=90)
    took = time.monotonic() - started
    out = (folder / f"slurm-{job}.out").read_text()
    master = f"{node_address('node1')}:{port}"
    assert state == "FAILED", out
    assert cluster.job_field(job, "ExitCode") == "124:0", out
    assert f"rank 1 on node2 cannot reach {master}" in out, out
    assert "rendezvous timed out: 1 of 2 ranks joined" in out
    assert f"gpu-doctor: rank 0 on node1 joined the rendezvous at {master}" in \
        (folder / "run" / "rank_0.log").read_text()
    assert took < 8 + 40, (took, out)   # the timeout, plus start-up (import torch) on 2 busy cores
    poll(lambda: not only_slurmd_left(cluster), 15, f"every node to be empty: {only_slurmd_left(cluster)}")


def slurmd_of(cluster: MultiNodeSlurm, node: str) -> int:
    for pid in cluster.node_pids(node):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"/usr/sbin/slurmd\0"):
                return pid
        except OSError:
            continue
    raise AssertionError(f"no slurmd on {node}")


@pytest.fixture
def quick_cluster(tmp_path: Path) -> Iterator[MultiNodeSlurm]:
    """SlurmdTimeout 10 s instead of 300: slurmctld gives up on a silent slurmd within the test."""
    with three_nodes(tmp_path / "slurm", slurmd_timeout=10) as c:
        yield c


def test_a_nodes_slurmd_killed_mid_run_ends_the_job_and_the_verdict_names_the_node(
        quick_cluster: MultiNodeSlurm, tmp_path: Path) -> None:
    """slurmd dies on node2; its ranks keep training under their slurmstepd until slurmctld,
    after SlurmdTimeout, sets node2 DOWN: srun says "Node failure on node2", Slurm cancels the
    job (NODE_FAIL, not requeued), and gpu-doctor's verdict names node2 and its ranks."""
    cluster = quick_cluster
    folder = tmp_path / "job"
    script = job_folder(folder, 2, "--grace 3 --kill-after 2",
                        "#SBATCH --no-requeue   # a failed run is looked at, not rerun from scratch\n")
    job = cluster.sbatch(script, f"--output={folder}/slurm-%j.out", f"--chdir={folder}", env=job_env())
    poll(lambda: all((folder / "run" / f"rank_{r}.log").exists() and
                     "step 3" in (folder / "run" / f"rank_{r}.log").read_text() for r in range(4)),
         120, "every rank to train")
    os.kill(slurmd_of(cluster, "node2"), signal.SIGKILL)

    # 10 s SlurmdTimeout, slurmctld's ping every few seconds, KillWait 2 s: well under 90 s.
    state = cluster.wait_job(job, timeout=90)
    out = (folder / f"slurm-{job}.out").read_text()
    assert state == "NODE_FAIL", out
    assert cluster.node_state("node2").startswith("down"), cluster.node_info("node2")
    assert "gpu-doctor: error: node node2 failed (ranks 2, 3 ran there): srun: \"Node failure on node2\" " \
        "(slurmctld lost its slurmd); Slurm cancels the job (`scontrol show node node2` says why)" in out, out
    verdict = re.search(r"^gpu-doctor: (node node2 failed .*) \(\d+\.\d s, exit code (\d+)\)$", out, re.M)
    assert verdict, out
    assert verdict.group(1).startswith('node node2 failed (ranks 2, 3 ran there): srun: "Node failure on node2"'), out
    # Slurm's SIGTERM to every process of the job ends the launch (and srun's tasks): 128 + 15.
    assert verdict.group(2) == "143", out
    summary = json.loads((folder / "run" / "summary.json").read_text())
    assert summary["exit_code"] == 143 and summary["reason"].startswith("node node2 failed (ranks 2, 3"), summary
    # Nothing hangs on the healthy node: node1 is left with its slurmd only.
    poll(lambda: "node1" not in only_slurmd_left(cluster), 15, f"node1 to be empty: {only_slurmd_left(cluster)}")


def test_a_rendezvous_port_rejected_by_the_masters_firewall_says_refused_not_silence(
        cluster: MultiNodeSlurm, tmp_path: Path) -> None:
    """node1's firewall REJECTs what comes in on eth0 for the port (rank 0's own connection, on
    node1, stays inside): it answers at once (a TCP reset: the connect fails with "Connection
    refused"), where DROP leaves the attempt unanswered. The message says which. (With REJECT's
    default ICMP answer the kernel rate-limits the answers, ~1/s after a burst of 6, and the
    rank's quick retries then sit unanswered: a firewall that looks like DROP now and then.)"""
    port = free_port()
    cluster.in_node("node1", "iptables", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", str(port),
                    "-j", "REJECT", "--reject-with", "tcp-reset")
    folder = tmp_path / "job"
    script = job_folder(folder, 1, f"--master-port {port} --rendezvous-timeout 12")
    # (the refusal is seen by the task's probe, 6 s in with this timeout: the others wait longer)
    job = cluster.sbatch(script, f"--output={folder}/slurm-%j.out", f"--chdir={folder}", env=job_env())
    state = cluster.wait_job(job, timeout=90)
    out = (folder / f"slurm-{job}.out").read_text()
    master = f"{node_address('node1')}:{port}"
    assert state == "FAILED", out
    assert cluster.job_field(job, "ExitCode") == "124:0", out
    assert f"rank 1 on node2 cannot reach {master} (connection refused: " in out, out
    assert "no answer to the connection attempt" not in out, out
    assert f"port {port}" in out.split(f"rank 1 on node2 cannot reach {master}")[1].splitlines()[0], out
    assert "rendezvous timed out: 1 of 2 ranks joined" in out
    poll(lambda: not only_slurmd_left(cluster), 15, f"every node to be empty: {only_slurmd_left(cluster)}")
