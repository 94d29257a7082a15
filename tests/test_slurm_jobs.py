"""Jobs on a real two-node Slurm cluster (both slurmds on this machine): `gpu-doctor launch`
through `srun`, and the sbatch script `gpu-doctor fix` writes, submitted for real.

The ranks are CPU `gloo` DDP processes (torch from the test interpreter), each under
the Score-P stand-in (tests/fake_scorep), so per-rank experiment folders appear as
with the real `python -m scorep`. One cluster for the module.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_util import fake_scorep_env
from remedy_util import NEVER_READY, raised
from slurm_cluster import LocalSlurm, free_port
from slurm_util import DDP_JOB, PYTHON, TORCHRUN, job_env, local_slurm, write_exec

from doctor.case import Case
from doctor.model import Finding

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.slurm]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    with local_slurm(tmp_path_factory.mktemp("slurm"), nodes=2, cpus=2) as cluster:
        yield cluster


def rank_lines(text: str) -> dict[int, str]:
    """`rank R of W on node N ...` lines of the DDP job, by rank."""
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"^rank (\d+) of 2 on node .*$", text, re.M)}


def test_launch_in_a_two_node_allocation_runs_one_instrumented_srun_task_per_rank(
        slurm: LocalSlurm, tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(DDP_JOB)
    run_dir = tmp_path / "run"
    port = free_port()   # not the default derived from the job id: test clusters all start at job 1
    script = write_exec(tmp_path / "launch.sbatch", f"""#!/bin/sh
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
exec {PYTHON} -m doctor launch --plain --instrument scorep --scorep-flags=--thread=pthread \\
    --master-port {port} --run-dir {run_dir} -- job.py --steps 2
""")
    env = job_env(fake_scorep_env(tmp_path, job_env()))
    job = slurm.sbatch(script, f"--output={tmp_path}/slurm-%j.out", f"--chdir={tmp_path}", env=env)

    state = slurm.wait_job(job, timeout=240)
    out = (tmp_path / f"slurm-{job}.out").read_text()
    assert state == "COMPLETED", out
    first, second = slurm.run("scontrol", "show", "hostnames", slurm.job_field(job, "NodeList")).stdout.split()
    # One srun step carries both ranks: rank from SLURM_PROCID, local rank from SLURM_LOCALID,
    # master = the allocation's first node.
    plan = json.loads((run_dir / "launch.json").read_text())
    [step] = plan["processes"]
    assert Path(step["argv"][0]).name == "srun" and step["ranks"] == [0, 1]
    assert "--nodes=2" in step["argv"] and "--ntasks-per-node=1" in step["argv"]
    for rank, node in ((0, first), (1, second)):
        log = (run_dir / f"rank_{rank}.log").read_text()
        assert re.search(rf"^rank {rank} of 2 on node {node} procid {rank} local 0 master {first}:{port}$",
                         log, re.M), log
        assert "all_reduce 3" in log and f"rank {rank} done" in log
        assert f"fake scorep: measuring job.py into scorep_rank_{rank}" in log
        assert (tmp_path / f"scorep_rank_{rank}" / "profile.cubex").exists()
    records = [json.loads(p.read_text()) for p in (tmp_path / "scorep_records").iterdir()]
    assert sorted(r["env"]["RANK"] for r in records) == ["0", "1"]
    assert all(r["flags"] == ["--thread=pthread"] for r in records)
    assert "all 2 ranks finished with exit code 0" in out


def test_launch_in_a_one_node_two_task_allocation_runs_one_srun_task_per_task(
        slurm: LocalSlurm, tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(DDP_JOB)
    run_dir = tmp_path / "run"
    script = write_exec(tmp_path / "launch.sbatch", f"""#!/bin/sh
#SBATCH --ntasks=2
#SBATCH --nodelist={slurm.host}
exec {PYTHON} -m doctor launch --plain --no-warmup --master-port {free_port()} --run-dir {run_dir} \\
    -- job.py --steps 1
""")
    job = slurm.sbatch(script, f"--output={tmp_path}/slurm-%j.out", f"--chdir={tmp_path}", env=job_env())

    state = slurm.wait_job(job, timeout=180)
    out = (tmp_path / f"slurm-{job}.out").read_text()
    assert state == "COMPLETED", out
    [step] = json.loads((run_dir / "launch.json").read_text())["processes"]
    assert Path(step["argv"][0]).name == "srun" and step["ranks"] == [0, 1], step
    for rank in (0, 1):
        log = (run_dir / f"rank_{rank}.log").read_text()
        assert f"rank {rank} of 2 on node {slurm.host} procid {rank} local {rank}" in log


# The field guide's job: torchrun wrapped in `python -m scorep` (LNC001) on a node whose
# CUDA runtime GPU003 found broken for good (LNC003).
BROKEN_SBATCH = f"""#!/bin/bash
#SBATCH --job-name=ddp-fixed
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2

{PYTHON} -m scorep --thread=pthread scorep_torchrun.py --nproc_per_node=2 job.py --steps 2
"""


def seed_findings(job: Path, bad_node: str) -> list[Finding]:
    """What the real LNC001 and LNC003 raise on BROKEN_SBATCH, on `bad_node` whose CUDA runtime
    never becomes ready (GPU003's probe result), so a check/remedy drift fails this test too."""
    found = raised(job.parent, "LNC001", "LNC003", host=bad_node, cuda_runtime=NEVER_READY)
    assert {(f.check_id, f.remedies) for f in found} == {("LNC001", ("per-rank-launch",)),
                                                         ("LNC003", ("exclude-node",))}, found
    return found


def test_the_fixed_sbatch_script_runs_off_the_broken_node_one_scorep_per_rank(
        slurm: LocalSlurm, tmp_path: Path) -> None:
    from doctor.remedy.apply import apply_plan
    from doctor.remedy.planner import make_plan

    job_script = tmp_path / "job.sbatch"
    job_script.write_text(BROKEN_SBATCH)
    (tmp_path / "scorep_torchrun.py").write_text(TORCHRUN)
    (tmp_path / "job.py").write_text(DDP_JOB)
    bad = slurm.host
    plan = make_plan(Case(root=tmp_path), seed_findings(job_script, bad))
    assert {p.remedy_id: p.status for p in plan.remedies} == {"per-rank-launch": "ready",
                                                               "exclude-node": "ready"}
    apply_plan(plan)
    fixed = job_script.read_text()
    assert f"#SBATCH --exclude={bad}" in fixed and "bash ./run_ranks.sh" in fixed

    # No GPU here: the per-rank script's CUDA warm-up is switched off by its documented knob.
    env = job_env(fake_scorep_env(tmp_path, job_env({"GPU_DOCTOR_WARMUP": "0"})))
    job = slurm.sbatch(job_script, f"--output={tmp_path}/slurm-%j.out", f"--chdir={tmp_path}", env=env)

    state = slurm.wait_job(job, timeout=180)
    out = (tmp_path / f"slurm-{job}.out").read_text()
    assert state == "COMPLETED", out
    assert slurm.job_field(job, "ExcNodeList") == bad
    assert slurm.job_field(job, "NodeList") == "localhost"
    ranks = rank_lines(out)
    assert sorted(ranks) == [0, 1], out
    assert all(" on node localhost " in line for line in ranks.values())
    assert "rank 0 done" in out and "rank 1 done" in out
    for rank in (0, 1):
        assert (tmp_path / f"scorep_rank_{rank}" / "profile.cubex").exists()
    records = [json.loads(p.read_text()) for p in (tmp_path / "scorep_records").iterdir()]
    assert sorted(r["env"]["SCOREP_EXPERIMENT_DIRECTORY"] for r in records) == ["scorep_rank_0", "scorep_rank_1"]
