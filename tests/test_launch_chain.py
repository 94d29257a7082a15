"""One job model for checks and remedies, on realistic job folders of each launch pattern.

Each pattern in tests/fixtures/launch_chain/ has a `broken` folder (what people write,
with one or more of the seed failures) and a `clean` one (the same job done right):
an outer script with a `torchrun --no-python` wrapper, `-m package.module`, a script
called with arguments, a per-rank loop, a launch assembled in a variable, in a `case`
arm, in an array, an overriding `env`, a heredoc. The checks must find what is wrong
and point at the line that set the value; `fix --apply --unsafe` must leave the folder
clean with every applied remedy verified; `undo` must restore it byte for byte; the
clean folders must raise nothing above pass.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from jobfix_util import failing, fix_apply_unsafe, messages
from jobfolder_util import run_check, where
from remedy_util import snapshot

from doctor.cli import main
from doctor.model import Status

CHAIN = Path(__file__).resolve().parent / "fixtures" / "launch_chain"

# pattern -> {check: evidence (file, line) that must be among the failing findings'}
# (SCP009: the Python instrumenter with Score-P's default 16000k aborts every rank that imports torch,
# measured with real Score-P 8.4; the clean folders set SCOREP_TOTAL_MEMORY)
EXPECTED: dict[str, dict[str, set[tuple[str, int]]]] = {
    "wrapper": {"SCP002": {("rank_wrapper.sh", 4), ("job.sbatch", 11)},
                "SCP006": {("rank_wrapper.sh", 3)},
                "SCP007": {("job.sbatch", 11)},
                "LNC002": {("rank_wrapper.sh", 4)},
                "SCR002": {("train.py", 9)}},
    "module": {"LNC002": {("launch.sh", 10)}, "SCR002": {("src/trainer/main.py", 9)},
               "SCP009": {("launch.sh", 10)}},
    "script_args": {"SCP003": {("run_example.sh", 5)}, "LNC001": {("run_example.sh", 7)},
                    "LNC002": {("run_example.sh", 7)}},
    "rank_loop": {"SCP006": {("run.sh", 11)}},
    "variable": {"SCP002": {("job.sbatch", 15), ("job.sbatch", 6), ("job.sbatch", 4)}},
    "case_arm": {"SCP005": {("job.sbatch", 14)}, "SCP009": {("job.sbatch", 14)}},
    "array": {"SCP002": {("run.sh", 11), ("run.sh", 2)}, "SCP009": {("run.sh", 11)}},
    "override_env": {"SCP006": {("run.sh", 10)}, "SCP009": {("run.sh", 10)}},
    "heredoc": {"SCP005": {("job.sbatch", 14)}, "SCP009": {("job.sbatch", 14)}},
    "srun_tasks": {"SCP006": {("job.slurm", 17)}},
}


# pattern -> text the fixed folder must hold: each edit went where the value is set, and only there.
AFTER: dict[str, list[tuple[str, str]]] = {
    "wrapper": [("rank_wrapper.sh", "export SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_${RANK}\n"),
                ("job.sbatch", "export SCOREP_CUDA_ENABLE=kernel,memcpy\n"),
                ("rank_wrapper.sh", "exec python -m scorep --cuda --mpp=none"),
                ("job.sbatch", "sleep \"${WARMUP_SLEEP:-10}\"\ndone\nif [ \"$cuda_ready\" != 1 ]")],
    "variable": [("job.sbatch", 'PYTHON_SCOREP="python -m scorep --cuda"\nPYTHON_SCOREP="$PYTHON_SCOREP --mpp=none"\n')],
    "array": [("run.sh", "LAUNCH=(python -m scorep --cuda --mpp=none)\n")],
    "case_arm": [("job.sbatch", "srun python -m scorep --cuda --thread=pthread train.py --steps 50\n")],
    "heredoc": [("job.sbatch", "<<'EOF'\npython -m scorep -- train.py\nEOF\n"),
                ("job.sbatch", "\npython -m scorep --cuda train.py --steps 10\n")],
    "override_env": [("run.sh", "SCOREP_EXPERIMENT_DIRECTORY=scorep_default env "
                                "SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_${r} RANK=$r")],
    "rank_loop": [("run.sh", "SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_${RANK} python -m scorep")],
    "script_args": [("run_example.sh", "export SCOREP_TOTAL_MEMORY=3500M\n"),
                    ("run_example.sh", "bash ./run_ranks.sh\n"), ("run_ranks.sh", "mingpt/main.py --epochs 1 &")],
    "module": [("src/trainer/main.py", "destroy_process_group()")],
    # srun expands the line once in the batch shell: each task names its folder in its own shell
    "srun_tasks": [("job.slurm", "srun --ntasks=4 --kill-on-bad-exit=1 bash -c 'SCOREP_EXPERIMENT_DIRECTORY="
                                 "scorep_rank_${SLURM_PROCID} exec \"$@\"' bash python -m scorep --cuda train.py\n")],
}


@pytest.mark.parametrize("pattern", sorted(EXPECTED))
def test_broken_pattern_raises_its_findings_at_the_line_that_set_the_value(pattern: str) -> None:
    found = failing(CHAIN / pattern / "broken")
    assert set(found) == set(EXPECTED[pattern]), messages(found)
    for cid, evidence in EXPECTED[pattern].items():
        assert evidence <= set(where(found[cid])), (cid, where(found[cid]))


@pytest.mark.parametrize("pattern", sorted(EXPECTED))
def test_clean_pattern_raises_nothing_above_pass(pattern: str) -> None:
    assert messages(failing(CHAIN / pattern / "clean")) == {}


@pytest.mark.parametrize("pattern", sorted(EXPECTED))
def test_fix_apply_unsafe_leaves_the_pattern_clean_and_undo_restores_it(
        pattern: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / pattern
    shutil.copytree(CHAIN / pattern / "broken", job, symlinks=True)
    before = snapshot(job)
    out, verified, left = fix_apply_unsafe(job, capsys)
    assert "NOT verified" not in out, out
    assert verified and all(v is True for v in verified.values()), verified
    assert left == {}, out
    for rel, text in AFTER[pattern]:
        assert text in (job / rel).read_text(), (rel, text)
    assert main(["undo", str(job)]) == 0
    capsys.readouterr()
    assert snapshot(job) == before


def test_the_wrapper_sees_the_outer_environment_and_the_ranks_torchrun_starts() -> None:
    from jobfolder_util import job_of

    job = job_of(CHAIN / "wrapper" / "broken")
    (cmd, launch), = job.instrumented
    assert cmd.site.file.endswith("rank_wrapper.sh") and cmd.parent is not None
    assert cmd.env["SCOREP_TOTAL_MEMORY"].value == "3500M"  # exported by job.sbatch
    assert cmd.env["SCOREP_ENABLE_TRACING"].site.file.endswith("env.sh")  # type: ignore[union-attr]
    assert launch.training_script == str(CHAIN / "wrapper" / "broken" / "train.py")
    assert launch.training_args[:2] == ("--epochs", "2")  # then the job's own "$@", known when it runs
    train = cmd.argv_words[cmd.argv.index("train.py")]
    assert train.source is not None and train.source.file.endswith("job.sbatch") and train.source.line == 14
    memory = run_check("SCP003", CHAIN / "wrapper" / "broken")
    assert [o.status for o in memory] == [Status.PASS] and ("job.sbatch", 12) in where(memory)


def test_the_process_tree_names_each_link_with_its_line(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "doctor", "--check-only", "--playbook", "scorep-ddp", "--json",
                           str(CHAIN / "wrapper" / "broken")], capture_output=True, text=True, timeout=120)
    doc = json.loads(proc.stdout)
    import jsonschema

    schema = json.loads((CHAIN.parents[2] / "doctor" / "schemas" / "gate.schema.json").read_text())
    jsonschema.validate(doc, schema)  # the published schema describes job.processes
    (script,) = doc["job"]["processes"]
    assert script["kind"] == "script" and script["file"] == "job.sbatch"
    (outer,) = script["children"]
    assert outer["launcher"] == "torchrun" and outer["wrappers"] == ["srun"] and outer["line"] == 14
    (worker,) = outer["children"]
    assert worker["file"] == "rank_wrapper.sh" and worker["measured"] and worker["ranks"] == 4
    assert worker["program"] == "train.py"
    assert worker["env_used"]["SCOREP_EXPERIMENT_DIRECTORY"] == {
        "value": "scorep-ddp", "raw": "scorep-ddp", "varies": False, "file": "rank_wrapper.sh", "line": 3}
    assert worker["env_used"]["RANK"]["varies"] and worker["env_used"]["SCOREP_TOTAL_MEMORY"]["line"] == 12


def test_a_link_it_cannot_follow_is_unknown_naming_the_link(tmp_path: Path) -> None:
    outside = tmp_path / "site_wrapper.sh"
    outside.write_text("exec python -m scorep --cuda \"$@\"\n")
    job = tmp_path / "job"
    job.mkdir()
    (job / "job.sbatch").write_text("#!/bin/bash\nexport SCOREP_CUDA_ENABLE=kernel\n"
                                    f"torchrun --nproc_per_node=2 --no-python {outside} train.py\n"
                                    "$(cat launcher.txt) train.py\n")
    (job / "train.py").write_text("print(1)\n")
    for cid in ("SCP002", "LNC001"):
        out = run_check(cid, job)
        assert [o.status for o in out] == [Status.UNKNOWN], (cid, [o.message for o in out])
        assert "site_wrapper.sh" in out[0].message and ("job.sbatch", 3) in where(out)
        assert ("job.sbatch", 4) in where(out)  # the command substitution


def test_evidence_names_the_assignment_a_flag_came_through(tmp_path: Path) -> None:
    from jobfolder_util import write_job

    write_job(tmp_path, {"run.sh": """
        #!/bin/bash
        export SCOREP_TOTAL_MEMORY=3500M
        MODEL=bert-base-uncased
        TRACE_ARGS="--eval_strategy no --save_strategy steps"
        TRACE_ARGS="$TRACE_ARGS --load_best_model_at_end True"
        # the launch
        python train.py --model "$MODEL" $TRACE_ARGS
        """, "train.py": "from transformers import Trainer, TrainingArguments, HfArgumentParser\n"
                         "parser = HfArgumentParser(TrainingArguments)\nargs = parser.parse_args_into_dataclasses()\n"})
    out = run_check("TRN001", tmp_path)
    assert [o.status for o in out] == [Status.FAIL], [o.message for o in out]
    assert ("run.sh", 5) in where(out) and ("run.sh", 7) not in where(out)


def test_runaway_and_deeply_nested_shell_is_bounded_not_a_crash(tmp_path: Path) -> None:
    from jobfolder_util import job_of, write_job

    doubling = "X=ab\n" + 'X="$X$X"\n' * 40 + "export SCOREP_TOTAL_MEMORY=$X\npython -m scorep --cuda t.py\n"
    nested = "python -m scorep ${A:-" * 300 + "t.py" + "}" * 300 + "\n"
    ifs = "if true; then\n" * 400 + "python -m scorep t.py\n" + "fi\n" * 400
    write_job(tmp_path, {"a.sh": doubling, "b.sh": nested, "c.sh": ifs, "t.py": "pass\n"})
    job = job_of(tmp_path)
    memory = [c.env["SCOREP_TOTAL_MEMORY"] for c in job.commands if "SCOREP_TOTAL_MEMORY" in c.env]
    assert memory and memory[0].value is None  # too long to follow: unknown, not 2**40 characters
    assert any("nested more than" in n.text for n in job.notes)
    out = run_check("SCP003", tmp_path)
    assert Status.UNKNOWN in [o.status for o in out]
