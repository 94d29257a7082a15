"""A value known only when the job runs keeps its text one level down (EnvVar.spelling): each shell
variable that set part of it replaced by that variable's own text, so what is left names only what
the job's environment has (`$BASE` is `/scratch/$USER/scorep/vit_${SLURM_JOB_ID}`); and the per-rank
folders scorep-per-rank-dirs writes stay under that base (issue 25)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from jobfix_util import fix_apply_unsafe
from jobfolder_util import job_of, write_job

from doctor.jobfolder.model import Command, EnvVar

HELDOUT = Path(__file__).resolve().parent / "fixtures" / "heldout" / "srun_task_base_var"
TRAIN = "import torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\n"


def launch_of(root: Path, script: str) -> Command:
    job = job_of(write_job(root, {"job.sh": "#!/bin/bash\n" + script + "python -m scorep --cuda train.py\n",
                                  "train.py": TRAIN}))
    (cmd, _launch), = job.instrumented
    return cmd


def experiment_dir(root: Path, script: str) -> EnvVar:
    var = launch_of(root, script).var("SCOREP_EXPERIMENT_DIRECTORY")
    assert var is not None
    return var


@pytest.mark.parametrize("script, spelling", [
    ("BASE=/scratch/$USER/scorep/vit_${SLURM_JOB_ID}\nexport SCOREP_EXPERIMENT_DIRECTORY=$BASE\n",
     "/scratch/$USER/scorep/vit_${SLURM_JOB_ID}"),
    ("BASE=/scratch/$USER/scorep/vit_${SLURM_JOB_ID}\nexport SCOREP_EXPERIMENT_DIRECTORY=${BASE}\n",
     "/scratch/$USER/scorep/vit_${SLURM_JOB_ID}"),
    ('BASE="/scratch/$USER/scorep/vit_${SLURM_JOB_ID}"\nexport SCOREP_EXPERIMENT_DIRECTORY="$BASE/run"\n',
     "/scratch/$USER/scorep/vit_${SLURM_JOB_ID}/run"),
    ("export BASE=/scratch/$USER/v_$SLURM_JOB_ID\nexport SCOREP_EXPERIMENT_DIRECTORY=$BASE\n",
     "/scratch/$USER/v_$SLURM_JOB_ID"),
    # two levels: each variable was spelled when it was set
    ("ROOT=/scratch/$USER\nBASE=$ROOT/scorep\nexport SCOREP_EXPERIMENT_DIRECTORY=$BASE/vit_$SLURM_JOB_ID\n",
     "/scratch/$USER/scorep/vit_$SLURM_JOB_ID"),
    # the known part expanded, the unknown one as written
    ("ROOT=/scratch/alice\nexport SCOREP_EXPERIMENT_DIRECTORY=$ROOT/vit_$SLURM_JOB_ID\n",
     "/scratch/alice/vit_$SLURM_JOB_ID"),
    ("STAMP=$(date +%s)\nexport SCOREP_EXPERIMENT_DIRECTORY=/scratch/$USER/run_$STAMP\n",
     "/scratch/$USER/run_$(date +%s)"),
    ("DIR=/scratch/$USER\nDIR+=/vit\nexport SCOREP_EXPERIMENT_DIRECTORY=$DIR\n", "/scratch/$USER/vit"),
    # `read` sets it to what the reader does not follow: nothing to spell, the name stays
    ("read -r BASE < base.txt\nexport SCOREP_EXPERIMENT_DIRECTORY=$BASE/vit\n", "$BASE/vit"),
])
def test_an_unknown_value_is_spelled_through_the_shell_variables_that_set_it(
        tmp_path: Path, script: str, spelling: str) -> None:
    var = experiment_dir(tmp_path, script)
    assert var.value is None and var.spelling == spelling and var.spelled == spelling


def test_a_known_value_has_no_spelling_of_its_own(tmp_path: Path) -> None:
    var = experiment_dir(tmp_path, "BASE=/scratch/alice\nexport SCOREP_EXPERIMENT_DIRECTORY=$BASE/vit\n")
    assert (var.value, var.spelling, var.spelled) == ("/scratch/alice/vit", None, "/scratch/alice/vit")


def test_the_commands_own_words_keep_the_variable_as_written(tmp_path: Path) -> None:
    # the spelling is the variable's; a word on the command still reads `$BASE` (remedies edit its span)
    job = job_of(write_job(tmp_path, {"job.sh": "#!/bin/bash\nBASE=/scratch/$USER/x_$SLURM_JOB_ID\n"
                                                      "python train.py --out $BASE/ckpt\n", "train.py": TRAIN}))
    (cmd,) = [c for c in job.commands if c.launch is not None]
    assert cmd.argv[-1] == "$BASE/ckpt" and not cmd.argv_words[-1].known


def test_the_fixed_task_script_writes_each_ranks_folder_under_the_jobs_base(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job"
    shutil.copytree(HELDOUT / "broken", job)
    out, verified, left = fix_apply_unsafe(job, capsys)
    assert verified.get("scorep-per-rank-dirs") is True and not left, out
    bin_dir = tmp_path / "bin"  # `python -m scorep ...` as the task runs it: say the folder it gets
    bin_dir.mkdir()
    (bin_dir / "python").write_text('#!/bin/sh\nprintf %s "$SCOREP_EXPERIMENT_DIRECTORY"\n')
    (bin_dir / "python").chmod(0o755)
    base = tmp_path / "scratch" / "vit_4711"  # what the batch shell exported, the same in every task
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SCOREP_EXPERIMENT_DIRECTORY": str(base),
           "SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8"}
    proc = subprocess.run(["bash", "task.sh"], cwd=job, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{base}/scorep_rank_5"
    assert base.is_dir()  # made before Score-P, which does not create the parents of its folder


BASE = "BASE=/scratch/$USER/scorep/vit_${SLURM_JOB_ID}\n"
TASK = "#!/bin/bash\n{own}exec python -m scorep --cuda train.py\n"
PER_TASK = ("\nSCOREP_EXPERIMENT_DIRECTORY=${SCOREP_EXPERIMENT_DIRECTORY}/scorep_rank_${SLURM_PROCID} exec python -m "
            "scorep --cuda train.py\n")
MKDIR = 'mkdir -p "$SCOREP_EXPERIMENT_DIRECTORY"'  # Score-P makes its folder, not the folder's parents
ON_THE_LINE = ("srun bash -c 'mkdir -p \"$SCOREP_EXPERIMENT_DIRECTORY\" && SCOREP_EXPERIMENT_DIRECTORY="
               "$SCOREP_EXPERIMENT_DIRECTORY/scorep_rank_${SLURM_PROCID} exec \"$@\"' bash python -m scorep --cuda "
               "train.py\n")


@pytest.mark.parametrize("nodes, batch, own, fixed, base", [
    (2, BASE + "export SCOREP_EXPERIMENT_DIRECTORY=$BASE\nsrun ./task.sh\n", "", ("task.sh", PER_TASK), "vit_"),
    (2, BASE + "export SCOREP_EXPERIMENT_DIRECTORY=${BASE}\nsrun ./task.sh\n", "", ("task.sh", PER_TASK), "vit_"),
    (2, BASE + 'export SCOREP_EXPERIMENT_DIRECTORY="$BASE"\nsrun ./task.sh\n', "", ("task.sh", PER_TASK), "vit_"),
    (2, BASE + "export SCOREP_EXPERIMENT_DIRECTORY=$BASE/run\nsrun ./task.sh\n", "", ("task.sh", PER_TASK), "/run/"),
    (2, "export " + BASE + "export SCOREP_EXPERIMENT_DIRECTORY=$BASE\nsrun ./task.sh\n", "", ("task.sh", PER_TASK),
     "vit_"),
    (2, "srun ./task.sh\n", BASE + "export SCOREP_EXPERIMENT_DIRECTORY=$BASE\n", ("task.sh", PER_TASK), "vit_"),
    (2, BASE + "export SCOREP_EXPERIMENT_DIRECTORY=$BASE\nsrun python -m scorep --cuda train.py\n", None,
     ("job.sbatch", ON_THE_LINE), "vit_"),
    (1, BASE + "export SCOREP_EXPERIMENT_DIRECTORY=$BASE\nsrun ./task.sh\n", "", ("task.sh", PER_TASK), "vit_"),
    (1, BASE + "export SCOREP_EXPERIMENT_DIRECTORY=$BASE\nsrun python -m scorep --cuda train.py\n", None,
     ("job.sbatch", ON_THE_LINE), "vit_"),
])
def test_per_rank_folders_stay_under_a_base_set_through_a_shell_variable(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], nodes: int, batch: str, own: str | None,
        fixed: tuple[str, str], base: str) -> None:
    files = {"job.sbatch": f"#!/bin/bash\n#SBATCH --nodes={nodes}\n#SBATCH --ntasks-per-node=4\n"
                           f"export SCOREP_TOTAL_MEMORY=3500M\nexport SCOREP_CUDA_BUFFER=64M\n{batch}",
             "train.py": TRAIN}
    if own is not None:
        files["task.sh"] = TASK.format(own=own)
    job = write_job(tmp_path, files)
    if own is not None:
        (job / "task.sh").chmod(0o755)
    out, verified, left = fix_apply_unsafe(job, capsys)
    assert verified.get("scorep-per-rank-dirs") is True and not left, out
    text = (job / fixed[0]).read_text()
    assert fixed[1] in text and MKDIR in text[:text.find(fixed[1]) + len(fixed[1])], text  # made first
    (cmd, _launch), = job_of(job).instrumented
    var = cmd.var("SCOREP_EXPERIMENT_DIRECTORY")  # the re-check reads each rank's folder under the base
    assert var is not None and var.varies and var.spelling is not None
    assert var.spelling.startswith("/scratch/$USER/scorep/vit_${SLURM_JOB_ID}") and base in var.spelling
    assert var.spelling.endswith("/scorep_rank_${SLURM_PROCID}")


def test_the_process_tree_shows_the_base_a_task_gets_one_level_down() -> None:
    import json

    import jsonschema

    from doctor.jobfolder.processes import job_json, launch_lines

    job = job_of(HELDOUT / "broken")
    tree = job_json(job)["processes"]
    schema = json.loads((HELDOUT.parents[3] / "doctor" / "schemas" / "gate.schema.json").read_text())
    jsonschema.validate(tree, {"type": "array", "items": {"$ref": "#/$defs/process"}, "$defs": schema["$defs"]})

    def used(nodes: list[dict]) -> list[dict]:
        return [v for n in nodes for v in [n.get("env_used", {}).get("SCOREP_EXPERIMENT_DIRECTORY")] + used(n["children"])
                if v is not None]

    (setting,) = {json.dumps(v, sort_keys=True): v for v in used(tree)}.values()
    assert (setting["raw"], setting["spelling"], setting["file"], setting["line"]) == (
        "$BASE", "/scratch/$USER/scorep/vit_${SLURM_JOB_ID}", "vit.sbatch", 15)
    assert any(line.strip() == "SCOREP_EXPERIMENT_DIRECTORY=/scratch/$USER/scorep/vit_${SLURM_JOB_ID} (known when it "
               "runs)  ← vit.sbatch:15" for line in launch_lines(job))


def test_a_double_quoted_bash_c_string_keeps_every_span_where_it_is_written_past_its_escapes(tmp_path: Path) -> None:
    # `\$` is one character of the string's value and two of the file: spans after it stay on their text
    write_job(tmp_path, {"job.sbatch": """
        #!/bin/bash
        #SBATCH --ntasks-per-node=4
        srun bash -c "
            export RANK=\\$SLURM_PROCID LOCAL_RANK=\\$SLURM_LOCALID
            export SCOREP_EXPERIMENT_DIRECTORY=run_$SLURM_JOB_ID
            python3 -u -m scorep train.py --epochs 1"
        """, "train.py": TRAIN})
    text = (tmp_path / "job.sbatch").read_text()
    ((cmd, _launch),) = job_of(tmp_path).instrumented
    assert cmd.span is not None and text[cmd.span.start:cmd.span.end] == "python3 -u -m scorep train.py --epochs 1"
    assert (cmd.span.line, cmd.span.col) == (6, 5)
    rank, folder = cmd.env["RANK"], cmd.env["SCOREP_EXPERIMENT_DIRECTORY"]
    assert rank.span is not None and text[rank.span.start:rank.span.end] == "$SLURM_PROCID" and rank.span.col == 18
    assert folder.span is not None and text[folder.span.start:folder.span.end] == "run_$SLURM_JOB_ID"
