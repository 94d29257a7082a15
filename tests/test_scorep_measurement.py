"""SCP009 (measurement memory) and SCP010 (overhead) on job folders, and their remedies.

The Score-P messages in the logs here are the ones tests/test_scorep_real.py makes real
Score-P 8.4 print; these tests pin how the checks read them and what they propose.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from jobfolder_util import bad, run_check, worst, write_job

from doctor.case import Case
from doctor.cli import main
from doctor.launch.spec import LaunchSpec, memory_warning, plan_ranks, total_memory_to_set
from doctor.model import Finding, Status
from doctor.remedy.planner import make_plan
from doctor.scorep_memory import judge, propose_total_memory

TRAIN = """
    import os

    import torch
    import torch.distributed as dist


    def main():
        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""

# A site's sbatch script: module load, a variable for the flags, srun starting one wrapper per task.
SBATCH = """
    #!/bin/bash
    #SBATCH --nodes=1
    #SBATCH --ntasks-per-node=2
    #SBATCH --output=slurm-%j.out
    module load scorep/8.4
    SCOREP_FLAGS="{flags}"
    export SCOREP_ENABLE_TRACING=true
    {exports}
    srun bash -c 'SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$SLURM_PROCID python -m scorep '"$SCOREP_FLAGS"' train.py --epochs 1'
"""

OOM = ("[Score-P] src/measurement/SCOREP_Memory.c:187: Error: No free memory page available: Out of memory. "
       "Please increase SCOREP_TOTAL_MEMORY={total} and try again.\n"
       "[Score-P] Memory usage of rank {rank}\n[Score-P] Memory used so far:\n")
DEPTH = ("[Score-P] src/measurement/profiling/scorep_profile_collapse.c:77: Warning: Score-P callpath depth "
         "limitation of 100 exceeded.\nReached callpath depth was {depth}.\n"
         "Consider setting SCOREP_PROFILING_MAX_CALLPATH_DEPTH to {depth}.\n")


def job(tmp_path: Path, flags: str = "--thread=pthread", exports: str = "", train: str = TRAIN,
        logs: dict[str, str] | None = None) -> Path:
    return write_job(tmp_path, {"job.sbatch": SBATCH.format(flags=flags, exports=exports), "train.py": train,
                                **(logs or {})})


def logscan_of(root: Path) -> list[dict]:
    from doctor.artifacts.logscan import discover_logs, scan_logs

    return list(scan_logs(discover_logs(root)))


# -- SCP009 -------------------------------------------------------------------


def test_scp009_fails_before_the_run_when_the_default_memory_meets_the_python_instrumenter(tmp_path: Path) -> None:
    out = run_check("SCP009", job(tmp_path))
    [finding] = bad(out)
    assert finding.status == Status.FAIL
    assert "the default 16000k" in finding.message and "train.py:3 imports torch" in finding.message
    assert finding.data["proposed"] == "256M" and finding.data["insert_before"] is True
    assert finding.remedies == ("scorep-measurement-memory",)


@pytest.mark.parametrize("flags, exports, train, status", [
    ("--thread=pthread", "export SCOREP_TOTAL_MEMORY=1G", TRAIN, Status.PASS),
    ("--thread=pthread", "export SCOREP_TOTAL_MEMORY=32M", TRAIN, Status.FAIL),
    ("--noinstrumenter --thread=pthread", "", TRAIN, Status.PASS),        # user regions only
    ("--thread=pthread", "", "print('no torch here')\n", Status.PASS),
    ("--thread=pthread", "export SCOREP_TOTAL_MEMORY=$MEM", TRAIN, Status.UNKNOWN),
])
def test_scp009_judges_the_setting_against_what_is_instrumented(tmp_path: Path, flags: str, exports: str,
                                                                train: str, status: Status) -> None:
    assert worst(run_check("SCP009", job(tmp_path, flags, exports, train))) == status


def test_scp009_reads_score_ps_own_value_from_the_logs(tmp_path: Path) -> None:
    root = job(tmp_path, exports="export SCOREP_TOTAL_MEMORY=32M",
               logs={"slurm-41.out": OOM.format(total=33554432, rank=0) + OOM.format(total=33554432, rank=1)})
    out = run_check("SCP009", root, {"logscan": logscan_of(root)})
    [from_log] = [o for o in out if "ran out" in o.message]
    assert from_log.status == Status.FAIL
    assert from_log.data["current_bytes"] == 33554432 and from_log.data["proposed"] == "512M"   # 16 x 32M
    assert from_log.evidence[0].file == "slurm-41.out" and from_log.evidence[0].line == 1
    assert from_log.data["line"] == 8 and from_log.data["insert_before"] is False   # the export to raise


def test_proposals_stay_under_the_4_gib_cap() -> None:
    assert propose_total_memory(16375808) == "256M"
    assert propose_total_memory(512 << 20) == "3500M"


def test_memory_reasons_name_the_value_once_and_say_when_score_p_clamps_it() -> None:
    assert judge("256M", True, True).reason.startswith("SCOREP_TOTAL_MEMORY=256M holds")
    assert judge("1024M", True, True).reason.startswith("SCOREP_TOTAL_MEMORY=1024M (1G) holds")
    clamped = judge("4G", True, True)
    assert clamped.enough and clamped.bytes == 4294967295
    assert clamped.reason.startswith("SCOREP_TOTAL_MEMORY=4G (clamped by Score-P to 4294967295 bytes) holds")
    assert judge(None, True, True).reason.startswith("the default 16000k cannot hold")


# -- SCP010 -------------------------------------------------------------------


@pytest.mark.parametrize("launch,files,why", [
    ("python -m scorep --cuda scorep_torchrun.py --nproc_per_node=2 train.py",
     {"scorep_torchrun.py": "from torch.distributed.run import main\n\nmain()\n"},
     "unfiltered (scorep_torchrun.py runs torch.distributed.run, which imports torch)"),
    ("python -m scorep --cuda $(which torchrun) --nproc_per_node=2 train.py", {},
     "unfiltered (torchrun, the launcher Score-P wraps, imports torch)"),
])
def test_scp010_names_what_imports_torch_when_score_p_wraps_the_launcher(
        tmp_path: Path, launch: str, files: dict[str, str], why: str) -> None:
    root = write_job(tmp_path, {"job.sh": f"#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=3500M\n{launch}\n",
                                "train.py": TRAIN, **files})
    [note] = run_check("SCP010", root)
    assert why in note.message, note.message


def test_scp010_before_any_run_only_notes_the_unfiltered_instrumenter(tmp_path: Path) -> None:
    [note] = run_check("SCP010", job(tmp_path))
    assert note.status == Status.PASS and "unfiltered (train.py:3 imports torch)" in note.message
    filtered = run_check("SCP010", job(tmp_path / "f", exports="export SCOREP_FILTERING_FILE=scorep.filter"))
    assert "filtered (SCOREP_FILTERING_FILE=scorep.filter)" in filtered[0].message
    assert "--noinstrumenter" in run_check("SCP010", job(tmp_path / "n", flags="--noinstrumenter"))[0].message


def test_scp010_proposes_the_callpath_depth_score_p_reached(tmp_path: Path) -> None:
    root = job(tmp_path, logs={"slurm-7.out": "step 1\n" + DEPTH.format(depth=178) + DEPTH.format(depth=149)})
    out = run_check("SCP010", root, {"logscan": logscan_of(root)})
    [depth] = [o for o in out if o.data.get("var") == "SCOREP_PROFILING_MAX_CALLPATH_DEPTH"]
    assert depth.status == Status.WARN and depth.data["proposed"] == 178 and depth.data["max_depth"] == 100
    assert [e.line for e in depth.evidence] == [2, 5]


# -- remedies, through `gpu-doctor fix` ------------------------------------------


def fix(capsys: pytest.CaptureFixture[str], root: Path, remedy: str) -> str:
    code = main(["fix", str(root), "--only", remedy, "--apply"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    return out


def test_memory_remedy_exports_the_proposal_before_the_launch(tmp_path: Path, capsys) -> None:
    root = job(tmp_path)
    fix(capsys, root, "scorep-measurement-memory")
    text = (root / "job.sbatch").read_text()
    assert "\nexport SCOREP_TOTAL_MEMORY=256M\nsrun bash -c" in text   # right above the launch
    assert worst(run_check("SCP009", root)) == Status.PASS


def test_memory_remedy_raises_a_small_value_to_score_ps_proposal(tmp_path: Path, capsys) -> None:
    root = job(tmp_path, exports="export SCOREP_TOTAL_MEMORY=32M",
               logs={"slurm-41.out": OOM.format(total=33554432, rank=0)})
    fix(capsys, root, "scorep-measurement-memory")
    assert "export SCOREP_TOTAL_MEMORY=512M\n" in (root / "job.sbatch").read_text()


def plan_one(root: Path, finding: Finding) -> str:
    plan = make_plan(Case(root=root), [finding], only=[finding.remedies[0]])
    assert [rp.status for rp in plan.remedies] == ["ready"], plan.remedies
    return plan.diff()


HEAVY_PROFILE = Path(__file__).resolve().parent / "cases" / "SCP010" / "heavy-profile-unfiltered"


def test_filter_remedy_from_the_heavy_profile_through_the_cli(tmp_path: Path, capsys) -> None:
    """The profile run's cube file raises SCP010 for real; `fix --diff --unsafe` prints exactly the
    case's stored diff (the filter names the busiest modules); apply -> verified; undo -> every byte."""
    import shutil

    from remedy_util import snapshot

    root = tmp_path / "job"
    shutil.copytree(HEAVY_PROFILE / "job", root)
    before = snapshot(root)
    assert main(["fix", str(root), "--diff", "--unsafe"]) == 0
    shown = capsys.readouterr().out
    assert shown == (HEAVY_PROFILE / "fix.diff").read_text()
    assert "+  EXCLUDE torch:* torch.* importlib:* importlib.* " in shown
    assert main(["fix", str(root), "--apply", "--unsafe"]) == 0
    out = capsys.readouterr().out
    assert "scorep-filter-file: verified" in out and "NOT verified" not in out
    assert (root / "scorep.filter").read_text().startswith("# Score-P filter for a diagnostic run")
    assert run_check("SCP010", root)[0].status == Status.PASS
    assert main(["undo", str(root)]) == 0
    assert snapshot(root) == before and not (root / "scorep.filter").exists()


def test_callpath_remedy_sets_the_depth_from_the_log(tmp_path: Path, capsys) -> None:
    root = job(tmp_path, logs={"slurm-7.out": DEPTH.format(depth=178)})
    fix(capsys, root, "scorep-callpath-depth")
    assert "export SCOREP_PROFILING_MAX_CALLPATH_DEPTH=178\n" in (root / "job.sbatch").read_text()


# -- gpu-doctor launch ----------------------------------------------------------


def test_launch_sets_the_memory_per_rank_only_when_the_user_has_not(tmp_path: Path) -> None:
    spec = LaunchSpec("train.py", nproc=2, workdir=tmp_path, instrument="scorep", env={"PATH": "/usr/bin"})
    assert {p.rank_env["SCOREP_TOTAL_MEMORY"] for p in plan_ranks(spec, 29500, tmp_path)} == {"256M"}
    mine = LaunchSpec("train.py", nproc=2, workdir=tmp_path, instrument="scorep",
                      env={"PATH": "/usr/bin", "SCOREP_TOTAL_MEMORY": "1G"})
    assert total_memory_to_set(mine, mine.base_env()) is None
    assert "SCOREP_TOTAL_MEMORY" not in plan_ranks(mine, 29500, tmp_path)[0].rank_env
    plain = LaunchSpec("train.py", nproc=2, workdir=tmp_path, env={"PATH": "/usr/bin"})
    assert total_memory_to_set(plain, plain.base_env()) is None


@pytest.mark.parametrize("value, flags, warned", [
    ("16000k", ("--thread=pthread",), "cannot hold the Python instrumenter's trace"),
    ("4G", ("--thread=pthread",), "Score-P reduces it to its maximum"),
    ("16000k", ("--noinstrumenter",), None),
    ("512M", ("--thread=pthread",), None),
])
def test_launch_warns_before_starting_when_the_memory_will_not_hold(tmp_path: Path, value: str,
                                                                    flags: tuple[str, ...], warned: str | None) -> None:
    spec = LaunchSpec("train.py", workdir=tmp_path, instrument="scorep", scorep_flags=flags,
                      env={"SCOREP_TOTAL_MEMORY": value})
    line = memory_warning(spec, spec.base_env())
    assert (line is None) if warned is None else (line is not None and warned in line)


def test_the_diagnosis_names_scp009_as_the_cause_of_the_aborted_ranks() -> None:
    """A job folder after a real default-memory run (logs and experiment folders as Score-P 8.4 left them)."""
    import subprocess
    import sys

    folder = Path(__file__).resolve().parent / "fixtures" / "runs" / "default-memory-abort"
    proc = subprocess.run([sys.executable, "-m", "doctor", "--check-only", "--playbook", "scorep-ddp", str(folder)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "root causes: SCP009 (explains ART003, ART004)" in proc.stdout + proc.stderr
    assert "--only scorep-measurement-memory" in proc.stdout + proc.stderr


def test_memory_remedy_edits_an_sbatch_export_where_the_value_is_set(tmp_path: Path, capsys) -> None:
    """`#SBATCH --export=ALL,SCOREP_TOTAL_MEMORY=32M` is not a shell word: scorep-total-memory
    edited it in place while scorep-measurement-memory (its own copy of the loop) gave up with a
    manual step. One loop (doctor.remedy.spans.set_values) now serves both."""
    from remedy_util import snapshot

    root = job(tmp_path, logs={"slurm-41.out": OOM.format(total=33554432, rank=0)})
    sbatch = root / "job.sbatch"
    sbatch.write_text(sbatch.read_text().replace("#SBATCH --nodes=1\n",
                                                 "#SBATCH --nodes=1\n#SBATCH --export=ALL,SCOREP_TOTAL_MEMORY=32M\n"))
    before = snapshot(root)
    assert worst(run_check("SCP009", root)) == Status.FAIL
    out = fix(capsys, root, "scorep-measurement-memory")
    assert "scorep-measurement-memory: verified" in out, out
    assert "#SBATCH --export=ALL,SCOREP_TOTAL_MEMORY=512M\n" in sbatch.read_text()
    assert "export SCOREP_TOTAL_MEMORY" not in sbatch.read_text().replace("--export=ALL,SCOREP_TOTAL", "")
    assert main(["undo", str(root)]) == 0
    assert snapshot(root) == before
