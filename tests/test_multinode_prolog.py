"""The Prolog across nodes, on the 3-node cluster: one node's CUDA runtime is broken
(the C fakes answer 802 for good, on node2 only); the Prolog drains exactly that node,
the requeued job runs on the other two, and `gpu-doctor fix` with the node's verdict file
adds `#SBATCH --exclude=node2`, after which the job never lands there.

Each node's Prolog reads its own conf (the wrapper picks `prolog-$SLURMD_NODENAME.conf`),
as each node of a real cluster has its own /etc/gpu-doctor/prolog.conf and its own GPUs.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from multinode_cluster import NODES, MultiNodeSlurm, three_nodes
from slurm_util import PROLOG_SH, PYTHON, REPO, PrologSetup, check, job_env, poll, write_exec

pytestmark = [pytest.mark.slow, pytest.mark.multinode]

GATE_TIMEOUT = 10


class NodePrologs(PrologSetup):
    """The Prolog on every node, each node with its own conf and fake GPUs."""

    def install(self) -> NodePrologs:
        super().install()
        write_exec(self.wrapper, f"""#!/bin/sh
start=$(date +%s.%N)
GPU_DOCTOR_PROLOG_CONF={shlex.quote(str(self.root))}/prolog-$SLURMD_NODENAME.conf {shlex.quote(str(PROLOG_SH))}
rc=$?
echo "$SLURM_JOB_ID $start $(date +%s.%N) $rc $SLURMD_NODENAME" >>{shlex.quote(str(self.timings))}
exit $rc
""")
        for node in NODES:
            self.node(node, "healthy")
        return self

    def node(self, node: str, scenario: str) -> None:
        self.write_conf(self.root / f"prolog-{node}.conf", self.root / f"fake-{node}", scenario)

    def nodes_run(self, job: str) -> list[tuple[str, int]]:
        """(node, exit status) of each Prolog run for `job`, in order."""
        lines = self.timings.read_text().splitlines() if self.timings.exists() else []
        return sorted((f[4], int(f[3])) for f in (ln.split() for ln in lines) if f[0] == job)


@pytest.fixture
def prologs(tmp_path: Path) -> NodePrologs:
    try:
        return NodePrologs(tmp_path / "prolog", timeout=GATE_TIMEOUT).install()
    except RuntimeError as exc:   # gcc missing: no fake libraries
        pytest.skip(str(exc))


@pytest.fixture
def cluster(tmp_path: Path, prologs: NodePrologs) -> Iterator[MultiNodeSlurm]:
    with three_nodes(tmp_path / "slurm", prolog=prologs.wrapper, prolog_timeout=60) as c:
        yield c


JOB = """#!/bin/bash
#SBATCH --job-name=ddp-2n
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:10:00

srun bash -c 'echo "task $SLURM_PROCID ran on $SLURMD_NODENAME"'
"""


def ran_on(out: Path) -> list[str]:
    return sorted(line.rsplit(" ", 1)[1] for line in out.read_text().splitlines() if " ran on " in line)


def fix(job_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "doctor", "fix", str(job_dir), *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env=job_env())


def test_the_prolog_drains_only_the_broken_node_and_the_fix_keeps_the_job_off_it(
        cluster: MultiNodeSlurm, prologs: NodePrologs, tmp_path: Path) -> None:
    prologs.node("node2", "permanent_802")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    script = write_exec(job_dir / "job.sbatch", JOB)
    out = job_dir / "first.out"
    job = cluster.sbatch(script, f"--output={out}", f"--chdir={job_dir}", env=job_env())

    # The scheduler's first choice is node[1-2]: node2's Prolog fails, node2 alone drains.
    poll(lambda: "DRAIN" in cluster.node_flags("node2"), 90, "node2 to drain")
    assert cluster.node_info("node2")["Reason"] == "Prolog error"
    assert all("DRAIN" not in cluster.node_flags(n) for n in ("node1", "node3"))
    poll(lambda: cluster.job_field(job, "Reason") == "launch_failed_requeued_held", 30,
         "the job to be requeued and held")
    reason = (prologs.verdicts / "node-node2.txt").read_text()
    assert reason.startswith("gpu-doctor: FAIL on node2: GPU003 fail"), reason
    assert "802 cudaErrorSystemNotReady" in reason
    assert sorted(p.name for p in prologs.verdicts.glob("node-*")) == ["node-node2.json", "node-node2.txt"]
    gpu003 = check(json.loads((prologs.verdicts / "node-node2.json").read_text()), "GPU003")
    assert gpu003["entities"] == [{"host": "node2"}]

    # The admin's view of the shared verdict folder: node2 fails now, Slurm drained it for that.
    view = subprocess.run([PYTHON, "-m", "doctor", "fleet", str(prologs.verdicts), "--json"], capture_output=True,
                          text=True, timeout=60, cwd=REPO, env={**cluster.env, "SLURM_CONF": str(cluster.conf)})
    assert view.returncode == 0, view.stderr
    doc = json.loads(view.stdout)
    assert {n["node"] for n in doc["nodes"]} == {"node1", "node2"}, doc["nodes"]
    assert [(f["node"], f["checks"]) for f in doc["failing_now"]] == [("node2", ["GPU003"])]
    assert doc["exclude"] == "node2"
    assert [(d["node"], d["reason"], d["tag"]) for d in doc["drains"]] == [("node2", "Prolog error", "node problem")]

    # Released, the requeued job runs on the two healthy nodes.
    cluster.run("scontrol", "release", job)
    assert cluster.wait_job(job, timeout=90) == "COMPLETED", cluster.job_info(job)
    assert ran_on(out) == ["node1", "node3"]
    assert ("node2", 1) in prologs.nodes_run(job) and ("node3", 0) in prologs.nodes_run(job)

    # gpu-doctor fix, given the node's verdict file, proposes the exclusion; applied, it holds.
    verdicts = [f"--findings={p}" for p in sorted(prologs.verdicts.glob("node-*.json"))]
    proposed = fix(job_dir, *verdicts, "--only", "exclude-node", "--diff")
    assert proposed.returncode == 0, proposed.stderr
    assert "+#SBATCH --exclude=node2" in proposed.stdout, proposed.stdout
    applied = fix(job_dir, *verdicts, "--only", "exclude-node", "--apply")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "#SBATCH --exclude=node2\n" in script.read_text()

    cluster.resume("node2")   # the admin puts node2 back (still broken): the job must avoid it itself
    poll(lambda: "DRAIN" not in cluster.node_flags("node2"), 30, "node2 to resume")
    for n in range(2):
        again = job_dir / f"again-{n}.out"
        job2 = cluster.sbatch(script, f"--output={again}", f"--chdir={job_dir}", env=job_env())
        assert cluster.wait_job(job2, timeout=90) == "COMPLETED", cluster.job_info(job2)
        assert cluster.job_field(job2, "ExcNodeList") == "node2"
        assert ran_on(again) == ["node1", "node3"]
        assert [node for node, _ in prologs.nodes_run(job2)] == ["node1", "node3"]
    assert "DRAIN" not in cluster.node_flags("node2")
