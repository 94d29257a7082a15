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
import re
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
# One write per line: two workers of a node share torchrun's stdout, and print() with
# PYTHONUNBUFFERED writes the text and its newline apart, so lines could interleave.
os.write(1, (f"rank {dist.get_rank()} of {dist.get_world_size()} on {os.uname().nodename} "
             f"into {os.environ['SCOREP_EXPERIMENT_DIRECTORY']}\\n").encode())
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


TORCHRUN_JOB = '''\
#!/bin/bash
#SBATCH --job-name=llm-2n
#SBATCH --nodes=2
#SBATCH --ntasks-per-node={per_node}
export SCOREP_TOTAL_MEMORY=64M
export SCOREP_ENABLE_TRACING=false
export SCOREP_ENABLE_PROFILING=true
export SCOREP_EXPERIMENT_DIRECTORY={base}/llm_$SLURM_JOB_ID
head=$(hostname -I | cut -d' ' -f1)
export GLOO_SOCKET_IFNAME={ifname} NCCL_SOCKET_IFNAME={ifname}
srun python -m scorep --cuda --noinstrumenter $(which torchrun) --nnodes=$SLURM_NNODES --nproc_per_node=2 \\
    --rdzv_id=$SLURM_JOB_ID --rdzv_backend=c10d --rdzv_endpoint=$head:29562 train.py --steps 1
'''


def gpu_env(tmp_path: Path, job_dir: Path, scorep: Path) -> dict[str, str]:
    """The job's environment: Score-P loaded, and the GPU stand-in first on PATH."""
    gpu = tmp_path / "gpu"
    gpu.mkdir()
    shim = gpu / "python"
    shim.write_text(GPU_PYTHON.format(log=job_dir / "warmup.log", python=PYTHON))
    shim.chmod(0o755)
    env = scorep_real.scorep_env(scorep)
    return job_env({"PATH": f"{gpu}:{env['PATH']}", "PYTHONPATH": env["PYTHONPATH"]})


def run_job(cluster: MultiNodeSlurm, script: Path, job_dir: Path, env: dict[str, str]) -> tuple[str, str]:
    job = cluster.sbatch(script, f"--output={job_dir}/slurm-%j.out", f"--chdir={job_dir}", env=env)
    try:
        state = cluster.wait_job(job, timeout=150)
    finally:
        log = (job_dir / f"slurm-{job}.out").read_text()
        print(log)
    assert state == "COMPLETED", log
    return job, log


def post_run(run: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert main(["--check-only", "--playbook", "post-run", str(run), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MultiNodeSlurm]:
    with three_nodes(tmp_path / "slurm") as c:
        yield c


@pytest.fixture
def named_cluster(tmp_path: Path) -> Iterator[MultiNodeSlurm]:
    """Node names resolve on the nodes: torchrun's c10d rendezvous looks its own host up."""
    with three_nodes(tmp_path / "slurm", resolve_names=True) as c:
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


@pytest.mark.parametrize("per_node, form", [(1, "torchrun"), (2, "srun")])
def test_torchrun_over_two_nodes_under_scorep_fixed_into_a_multi_node_form_measures_every_worker(
        named_cluster: MultiNodeSlurm, tmp_path: Path, capsys: pytest.CaptureFixture[str], per_node: int,
        form: str) -> None:
    """`srun python -m scorep ... torchrun --nnodes=2 --nproc_per_node=2`: with one task per node
    in the allocation, per-rank-launch keeps torchrun and its rendezvous and starts each worker
    through scorep_rank.sh (the torchrun form); with a task per rank (`--ntasks-per-node=2`), srun
    starts every rank through run_rank.sh (the srun form). Either way every one of the 4 ranks on
    the 2 nodes leaves its own profile under the job's base path."""
    scorep = scorep_real.require()
    job_dir, base = tmp_path / "job", tmp_path / "scratch" / "user" / "scorep"
    job_dir.mkdir()
    base.mkdir(parents=True)
    (job_dir / "train.py").write_text(TRAIN)
    script = job_dir / "llm.sbatch"
    script.write_text(TORCHRUN_JOB.format(base=base, ifname=IFNAME, per_node=per_node))

    assert main(["fix", str(job_dir), "--apply", "--unsafe"]) == 0
    said = "".join(capsys.readouterr())
    assert "per-rank-launch: verified" in said and "cuda-warmup: verified" in said, said
    fixed = script.read_text()
    if form == "torchrun":
        assert "--no-python ./scorep_rank.sh train.py --steps 1" in fixed, fixed
        rank_script = job_dir / "scorep_rank.sh"
    else:
        assert 'srun --ntasks-per-node=2 --ntasks="$((SLURM_JOB_NUM_NODES * 2))" bash ./run_rank.sh train.py' in fixed
        assert "which torchrun" not in fixed and fixed.index("cuda_ready=0") < fixed.index("run_rank.sh"), fixed
        rank_script = job_dir / "run_rank.sh"
    assert f"{form.capitalize()} form" in rank_script.read_text()

    for path in (script, rank_script):  # no CUDA here
        path.write_text(path.read_text().replace(" --cuda", ""))
    cluster = named_cluster
    job, log = run_job(cluster, script, job_dir, gpu_env(tmp_path, job_dir, scorep))
    nodes = cluster.nodes_of(job)
    assert sorted((job_dir / "warmup.log").read_text().splitlines()) == sorted(f"warm-up on {n}" for n in nodes)
    run = base / f"llm_{job}"
    for rank in range(4):
        assert re.search(rf"^rank {rank} of 4 on ({'|'.join(nodes)}) into {run}/scorep_rank_{rank}$", log, re.M), log
        assert (run / f"scorep_rank_{rank}" / "profile.cubex").is_file(), sorted(run.rglob("*"))
    assert {m.group(1) for m in re.finditer(r"^rank \d of 4 on (\S+)", log, re.M)} == set(nodes)
    doc = post_run(run, capsys)
    assert doc["status"] == "pass", [(c["id"], c["status"], c["message"]) for c in doc["checks"]]
    assert cluster.run("squeue", "-h", "-o", "%i").stdout.strip() == ""


BASE_VAR_JOB = '''\
#!/bin/bash
#SBATCH --job-name=vit-2n
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
export SCOREP_TOTAL_MEMORY=64M
export SCOREP_ENABLE_TRACING=false
export SCOREP_ENABLE_PROFILING=true
BASE={base}/vit_${{SLURM_JOB_ID}}
export SCOREP_EXPERIMENT_DIRECTORY=$BASE
export MASTER_ADDR=$(hostname -I | cut -d' ' -f1)
export MASTER_PORT=29563
export GLOO_SOCKET_IFNAME={ifname} NCCL_SOCKET_IFNAME={ifname}
srun ./task.sh
'''

TASK = '''\
#!/bin/bash
exec python -m scorep --cuda --noinstrumenter train.py --steps 1
'''


def test_a_base_set_through_an_unexported_shell_variable_keeps_every_ranks_folder_under_it(
        cluster: MultiNodeSlurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`BASE=.../vit_${SLURM_JOB_ID}; export SCOREP_EXPERIMENT_DIRECTORY=$BASE; srun ./task.sh`:
    BASE never reaches the tasks; the fixed task script names its folder under the exported value."""
    scorep = scorep_real.require()
    job_dir, base = tmp_path / "job", tmp_path / "scratch" / "user" / "scorep"
    job_dir.mkdir()
    base.mkdir(parents=True)
    (job_dir / "train.py").write_text(TRAIN)
    script, task = job_dir / "vit.sbatch", job_dir / "task.sh"
    script.write_text(BASE_VAR_JOB.format(base=base, ifname=IFNAME))
    task.write_text(TASK)
    task.chmod(0o755)

    assert main(["fix", str(job_dir), "--apply", "--unsafe"]) == 0
    said = "".join(capsys.readouterr())
    assert "scorep-per-rank-dirs: verified" in said and "cuda-warmup: verified" in said, said
    assert "${SCOREP_EXPERIMENT_DIRECTORY}/scorep_rank_${SLURM_PROCID} exec python" in task.read_text()

    task.write_text(task.read_text().replace(" --cuda", ""))  # no CUDA here
    job, log = run_job(cluster, script, job_dir, gpu_env(tmp_path, job_dir, scorep))
    nodes = cluster.nodes_of(job)
    run = base / f"vit_{job}"
    for rank, node in enumerate(nodes):
        assert f"rank {rank} of 2 on {node} into {run}/scorep_rank_{rank}" in log, log
        assert (run / f"scorep_rank_{rank}" / "profile.cubex").is_file(), sorted(run.rglob("*"))
    assert not list(job_dir.glob("scorep*")), "nothing measured into the submit folder"
    doc = post_run(run, capsys)
    assert doc["status"] == "pass", [(c["id"], c["status"], c["message"]) for c in doc["checks"]]
    assert cluster.run("squeue", "-h", "-o", "%i").stdout.strip() == ""


def test_launch_over_two_nodes_from_the_folder_above_measures_every_rank_into_the_job_folder(
        cluster: MultiNodeSlurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`gpu-doctor launch -- job/train.py` typed in the folder above the job, over 2 nodes × 2 tasks:
    every rank's Score-P folder and log land in the job folder (as a local launch puts them), none in
    the folder the user started from, and post-run on the job folder judges all four."""
    scorep = scorep_real.require()
    job_dir = tmp_path / "work" / "job"
    job_dir.mkdir(parents=True)
    (job_dir / "train.py").write_text(TRAIN)
    start = job_dir.parent
    script = start / "launch.sbatch"
    script.write_text(f"""#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
exec {PYTHON} -m doctor launch --plain --no-warmup --instrument scorep \\
    --scorep-flags "--noinstrumenter --thread=pthread" -- job/train.py
""")
    env = scorep_real.scorep_env(scorep)
    env = job_env({"PATH": env["PATH"], "PYTHONPATH": env["PYTHONPATH"]})
    job = cluster.sbatch(script, f"--output={start}/slurm-%j.out", f"--chdir={start}", env=env)

    state = cluster.wait_job(job, timeout=180)
    out = (start / f"slurm-{job}.out").read_text()
    assert state == "COMPLETED", out
    assert "all 4 ranks finished with exit code 0" in out, out
    [run] = (job_dir / ".gpu-doctor" / "runs").iterdir()
    first, second = cluster.nodes_of(job)
    for rank, node in ((0, first), (1, first), (2, second), (3, second)):
        log = (run / f"rank_{rank}.log").read_text()
        assert f"rank {rank} of 4 on {node} into {job_dir}/scorep_rank_{rank}" in log, log
        assert (job_dir / f"scorep_rank_{rank}" / "profile.cubex").is_file(), sorted(job_dir.rglob("*"))
    assert not list(start.glob("scorep_rank_*")) and not (start / ".gpu-doctor").exists(), sorted(start.iterdir())
    assert f"log {run}/rank_0.log" in out, out
    plan = json.loads((run / "launch.json").read_text())
    assert [r["env"]["SCOREP_EXPERIMENT_DIRECTORY"] for r in plan["ranks"]] == \
        [f"{job_dir}/scorep_rank_{r}" for r in range(4)]

    capsys.readouterr()
    assert main(["--check-only", "--playbook", "post-run", str(job_dir), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "pass", [(c["id"], c["status"], c["message"]) for c in doc["checks"]]
    art003 = next(c for c in doc["checks"] if c["id"] == "ART003")
    assert art003["message"] == "all 4 rank folders hold a readable trace or profile"
