"""Held-out job folders: launch spellings from HPC centres and public training repos that the job
model was not tuned on, each as a `broken` and a `clean` variant (tests/fixtures/heldout/).

torchtitan's run_train.sh (`${CONFIG_FILE:-...}`, `overrides="$*"`, `-m torchtitan.train`), an srun
wrapper mapping SLURM_PROCID to RANK, an MPI per-rank Score-P wrapper picking its rank from
OMPI_COMM_WORLD_RANK / PMI_RANK / SLURM_PROCID, a job array taking its config from a bash array,
`case "$MODE"` with MODE set above, a shell function around srun, accelerate, nanoGPT, deepspeed,
a C-style per-rank loop, HF Trainer arguments in an array and a string, a two-node torchrun
rendezvous with a `--no-python` wrapper, `cd "$SLURM_SUBMIT_DIR"` + `module load`.

The broken variant raises what is wrong, with evidence on the line that set the value; the clean
one raises nothing above pass in the job layers; `fix --apply --unsafe` leaves the broken one
clean (each applied remedy verified) or the remedy says why it cannot; `undo` restores the bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from jobfix_util import failing, fix_apply_unsafe, messages
from jobfolder_util import job_of, where
from remedy_util import snapshot

from doctor.cli import main

HELDOUT = Path(__file__).resolve().parent / "fixtures" / "heldout"

# folder -> {check: evidence (file, line) that must be among its findings}
EXPECTED: dict[str, dict[str, set[tuple[str, int]]]] = {
    "titan_run_train": {"LNC001": {("run_train.sh", 27)}},
    "srun_procid": {"SCP006": {("launch_rank.sh", 6), ("launch_rank.sh", 7)}},
    "mpirun_wrapper": {"SCP005": {("scorep_wrapper.sh", 11)}, "SCP006": {("scorep_wrapper.sh", 10)}},
    "array_configs": {"SCP007": {("sweep.sbatch", 15)}},
    # the `trace` arm's `--` never runs: MODE=profile is set on line 4
    "case_mode": {"SCP003": {("job.sh", 23)}},
    "function_launch": {"SCP002": {("submit.sh", 22), ("env.sh", 1)}, "SCP006": {("submit.sh", 9)}},
    "accelerate_launch": {"LNC001": {("launch.sh", 16)}},
    "nanogpt": {"LNC001": {("run.sh", 15)}},
    "deepspeed_gpus": {"LNC001": {("ds_run.sh", 16)}},
    "perrank_cfor": {"SCR002": {("train.py", 22)}},
    # a plain HF Trainer job: PyTorch >= 2.4 warns when the group outlives the process (SCR002 warn)
    "hf_trainer_args": {"TRN001": {("finetune.sh", 12)}, "SCR002": {("run_glue.py", 18)}},
    "multinode_rdzv": {"SCP006": {("node_wrapper.sh", 2)}},
    "submit_dir_memory": {"SCP003": {("job.slurm", 9)}, "LNC002": {("job.slurm", 10), ("job.slurm", 12)}},
}

# folder -> text the fixed folder must hold (each edit where the value is set, and only there)
AFTER: dict[str, list[tuple[str, str]]] = {
    "mpirun_wrapper": [("scorep_wrapper.sh", "SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_${RANK} python -m scorep --cuda "
                                             '"$@"\n')],
    "case_mode": [("job.sh", 'srun python -m scorep --cuda -- train.py --steps "$STEPS"\n'),  # not run: untouched
                  ("job.sh", "export SCOREP_TOTAL_MEMORY=3500M\n        srun")],
    "array_configs": [("sweep.sbatch", "export SCOREP_CUDA_ENABLE=kernel,memcpy,idle\n")],
    "hf_trainer_args": [("finetune.sh", 'SAVE_ARGS="--save_strategy steps --save_steps 500 '
                                        '--load_best_model_at_end False"\n')],
    "nanogpt": [("run.sh", "\nbash ./run_ranks.sh\n"), ("run_ranks.sh", "config/train_shakespeare_char.py")],
    "submit_dir_memory": [("job.slurm", "export SCOREP_TOTAL_MEMORY=3500M\n")],
}

# folder -> {check left after the fix: the remedy that must say why it cannot}
CANNOT: dict[str, dict[str, str]] = {
    "accelerate_launch": {"LNC001": "per-rank-launch"},
    "deepspeed_gpus": {"LNC001": "per-rank-launch"},
    "titan_run_train": {"LNC001": "per-rank-launch"},
}


def test_every_heldout_folder_has_both_variants_and_an_expectation() -> None:
    folders = {p.name for p in HELDOUT.iterdir() if p.is_dir()}
    assert folders == set(EXPECTED) and len(folders) >= 12
    for name in folders:
        assert (HELDOUT / name / "broken").is_dir() and (HELDOUT / name / "clean").is_dir(), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_broken_heldout_job_raises_its_findings_at_the_line_that_set_the_value(name: str) -> None:
    found = failing(HELDOUT / name / "broken")
    assert set(found) == set(EXPECTED[name]), messages(found)
    for cid, evidence in EXPECTED[name].items():
        assert evidence <= set(where(found[cid])), (cid, where(found[cid]))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_clean_heldout_job_raises_nothing_above_pass(name: str) -> None:
    assert messages(failing(HELDOUT / name / "clean")) == {}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fix_leaves_the_heldout_job_clean_or_says_why_not_and_undo_restores_it(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / name
    shutil.copytree(HELDOUT / name / "broken", job, symlinks=True)
    before = snapshot(job)
    out, verified, left = fix_apply_unsafe(job, capsys)
    assert "NOT verified" not in out and "Traceback" not in out, out
    assert all(v is True for v in verified.values()), verified
    cannot = CANNOT.get(name, {})
    assert set(left) == set(cannot), (left, out)
    for remedy in cannot.values():
        assert f"{remedy}: cannot apply here: " in out, out
    if not cannot:
        assert verified, out
    for rel, text in AFTER.get(name, []):
        assert text in (job / rel).read_text(), (rel, text)
    if verified:  # something was applied
        assert main(["undo", str(job)]) == 0
        capsys.readouterr()
    assert snapshot(job) == before


def test_a_case_arm_that_cannot_run_is_not_read_as_a_launch() -> None:
    job = job_of(HELDOUT / "case_mode" / "clean")
    launched = [c.site.line for c, _launch in job.instrumented]
    assert launched == [23]  # the `profile)` arm; `trace)` (line 19) does not run with MODE=profile
    assert "SCOREP_ENABLE_TRACING" in job.instrumented[0][0].env  # its export in that arm
    assert job.instrumented[0][0].env["SCOREP_ENABLE_TRACING"].value == "false"


def test_an_mpi_wrapper_names_each_ranks_folder_from_the_rank_it_exports() -> None:
    from doctor.jobfolder.queries import rank_spelling

    job = job_of(HELDOUT / "mpirun_wrapper" / "broken")
    (cmd, _launch), = job.instrumented
    assert [w.name for w in cmd.wrappers] == ["mpirun"] and cmd.per_task
    assert rank_spelling(cmd) == "${RANK}"
    assert cmd.env["RANK"].varies
