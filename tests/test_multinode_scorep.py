"""A 2-node Score-P job fixed by `gpu-doctor fix`, then run for real on the 3-node test cluster
(tests/multinode_cluster.py) with real Score-P (tests/scorep_real.py).

The job as a user writes it: `#SBATCH --nodes=2 --ntasks-per-node=1`, one experiment folder
under their own base path (`.../resnet_$SLURM_JOB_ID`), `srun python -m scorep --cuda ...`.
`fix --apply --unsafe` gives every rank its own folder under that base and warms CUDA up once
on every node (one srun task per node) before the instrumented step. Then the job runs:

- this machine has no GPU and its Score-P no CUDA support, so the run drops `--cuda` from the
  fixed script (nothing else is changed), and a `python` first on PATH answers the warm-up's
  CUDA probe, writing which node asked (the stand-in for a GPU; every other `python` is the real
  interpreter);
- the ranks are a tiny gloo DDP job, 1 step, under `python -m scorep --noinstrumenter`
  (no Python instrumenter: seconds, not minutes), profiling only.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import scorep_real
from multinode_cluster import IFNAME, MultiNodeSlurm, three_nodes
from slurm_util import PYTHON, job_env

from doctor.cli import main

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.multinode]

TRAIN = '''\
import os

os.environ.setdefault("RANK", os.environ["SLURM_PROCID"])
os.environ.setdefault("WORLD_SIZE", os.environ["SLURM_NTASKS"])
os.environ.setdefault("LOCAL_RANK", os.environ["SLURM_LOCALID"])

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
loss = model(torch.randn(8, 4)).pow(2).mean()
loss.backward()
print(f"rank {dist.get_rank()} of {dist.get_world_size()} on {os.uname().nodename} "
      f"into {os.environ['SCOREP_EXPERIMENT_DIRECTORY']}", flush=True)
dist.destroy_process_group()
'''

JOB = '''\
#!/bin/bash
#SBATCH --job-name=resnet-2n
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
export SCOREP_TOTAL_MEMORY=64M
export SCOREP_ENABLE_TRACING=false
export SCOREP_ENABLE_PROFILING=true
export SCOREP_EXPERIMENT_DIRECTORY={base}/resnet_$SLURM_JOB_ID
# the batch shell runs on the first node: its address is the rendezvous (node names do not resolve here)
export MASTER_ADDR=$(hostname -I | cut -d' ' -f1)
export MASTER_PORT=29561
export GLOO_SOCKET_IFNAME={ifname} NCCL_SOCKET_IFNAME={ifname}
srun python -m scorep --cuda --noinstrumenter train.py --steps 1
'''

# The GPU stand-in: the warm-up's CUDA probe (and only it) answers "ready" and says which node asked.
GPU_PYTHON = '''\
#!/bin/bash
case "$*" in
    *"torch.zeros(1).cuda()"*) echo "warm-up on $(hostname)" >> {log}; exit 0 ;;
esac
exec {python} "$@"
'''


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MultiNodeSlurm]:
    with three_nodes(tmp_path / "slurm") as c:
        yield c


def test_a_fixed_two_node_job_warms_every_node_and_writes_one_folder_per_rank_under_its_base(
        cluster: MultiNodeSlurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scorep = scorep_real.require()
    job_dir, base = tmp_path / "job", tmp_path / "scratch" / "user" / "scorep"
    job_dir.mkdir()
    base.mkdir(parents=True)
    (job_dir / "train.py").write_text(TRAIN)
    script = job_dir / "job.sbatch"
    script.write_text(JOB.format(base=base, ifname=IFNAME))

    assert main(["fix", str(job_dir), "--apply", "--unsafe"]) == 0
    out = capsys.readouterr()
    said = out.out + out.err
    assert "scorep-per-rank-dirs: verified" in said and "cuda-warmup: verified" in said, said
    fixed = script.read_text()
    assert '--ntasks-per-node=1 bash -c' in fixed and "never became ready on $(hostname)" in fixed, fixed
    assert "$SCOREP_EXPERIMENT_DIRECTORY/scorep_rank_${SLURM_PROCID}" in fixed, fixed
    assert fixed.index("--ntasks-per-node=1 bash -c") < fixed.index("srun bash -c 'mkdir -p")

    script.write_text(fixed.replace("python -m scorep --cuda ", "python -m scorep "))  # no CUDA here
    gpu = tmp_path / "gpu"
    gpu.mkdir()
    shim = gpu / "python"
    shim.write_text(GPU_PYTHON.format(log=job_dir / "warmup.log", python=PYTHON))
    shim.chmod(0o755)
    env = scorep_real.scorep_env(scorep)
    env = job_env({"PATH": f"{gpu}:{env['PATH']}", "PYTHONPATH": env["PYTHONPATH"]})
    job = cluster.sbatch(script, f"--output={job_dir}/slurm-%j.out", f"--chdir={job_dir}", env=env)

    try:
        state = cluster.wait_job(job, timeout=150)
    finally:
        log = (job_dir / f"slurm-{job}.out").read_text()
        print(log)
    assert state == "COMPLETED", log
    nodes = cluster.nodes_of(job)
    assert len(nodes) == 2
    warmed = (job_dir / "warmup.log").read_text().splitlines()
    assert sorted(warmed) == sorted(f"warm-up on {n}" for n in nodes), warmed
    run = base / f"resnet_{job}"
    for rank, node in enumerate(nodes):
        assert f"rank {rank} of 2 on {node} into {run}/scorep_rank_{rank}" in log, log
        assert (run / f"scorep_rank_{rank}" / "profile.cubex").is_file(), sorted(run.rglob("*"))
    assert sorted(p.name for p in run.iterdir()) == ["scorep_rank_0", "scorep_rank_1"]
    assert not list(job_dir.glob("scorep*")), "nothing measured into the submit folder"

    # The post-run verdict over the job's own base path: every rank's measurement is there.
    capsys.readouterr()
    assert main(["--check-only", "--playbook", "post-run", str(run), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "pass", [(c["id"], c["status"], c["message"]) for c in doc["checks"]]
    art003 = next(c for c in doc["checks"] if c["id"] == "ART003")
    assert art003["message"] == "all 2 rank folders hold a readable trace or profile"

    assert cluster.run("squeue", "-h", "-o", "%i").stdout.strip() == ""
    assert shutil.which("srun")  # the fixture then checks that nothing of the cluster is left
