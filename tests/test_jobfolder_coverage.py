"""Honest coverage: a job that was not read never passes, and a value the reader could not follow is
`unknown`, never an older value (issue 24).

The verdict of the job checks over a folder, with a healthy node's facts preset: NOT CHECKED /
NOTHING CHECKED naming why, exit 1, where the job script or the program it starts was not read or
nothing in it was checked; the static reader's spellings beside the held-out folders.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from jobfolder_util import HEALTHY, JOB_CHECKS, case_for, job_of, run_check, write_job

from doctor.model import Status
from doctor.runner import run_checks
from doctor.verdict import exit_code, reason_line, run_json

TRAIN = "import torch\nimport torch.distributed as dist\n\ndist.init_process_group('nccl')\ndist.destroy_process_group()\n"
WARM = ("for try in $(seq 1 20); do\n    if python -c 'import torch; torch.zeros(1).cuda()'; then\n        break\n"
        "    fi\n    sleep 6\ndone\n")


def verdict(root: Path) -> tuple[int, str, dict[str, object]]:
    """(exit code, reason line, JSON) of the job checks over `root` on a healthy node with Score-P."""
    run = run_checks(case_for(root), list(JOB_CHECKS), preset_facts=dict(HEALTHY))
    return int(exit_code(run)), reason_line(run), run_json(run, argv=[])


def test_a_program_that_does_not_exist_is_not_checked(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sh": f"#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=3500M\n{WARM}"
                                   "python -m scorep --cuda train.py\n"})
    code, line, doc = verdict(tmp_path)
    assert code == 1 and line.startswith("gpu-doctor: NOT CHECKED on node07: train.py, which job.sh:9 starts, "
                                         "does not exist"), line
    assert doc["status"] == "fail" and str(doc["not_checked"]).startswith("NOT CHECKED: train.py")


def test_a_job_script_with_a_nul_byte_is_not_checked(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sh": b"#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=3500M\n"
                                   b"python -m scorep --cuda tr\0ain.py\n", "train.py": TRAIN})
    code, line, _doc = verdict(tmp_path)
    assert code == 1 and "NOT CHECKED" in line and "job.sh was not read (binary file (NUL bytes)" in line, line


def test_a_job_script_that_runs_itself_is_not_checked(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sh": f"#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=3500M\n{WARM}bash ./job.sh\n"
                                   "python -m scorep --cuda train.py\n", "train.py": TRAIN})
    code, line, _doc = verdict(tmp_path)
    assert code == 1 and line.startswith("gpu-doctor: NOT CHECKED on node07: job.sh:9 runs './job.sh', which is "
                                         "already running there"), line
    # still read as a job (it is no one else's child): its launch is in the model
    assert [c.site.line for c, _l in job_of(tmp_path).instrumented] == [10]


def test_a_self_referencing_job_still_raises_its_findings(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sh": f"#!/bin/bash\n{WARM}bash ./job.sh\npython -m scorep --cuda -- train.py\n",
                         "train.py": TRAIN})
    code, line, _doc = verdict(tmp_path)
    assert code == 1 and "SCP005" in line, line


def test_a_folder_with_nothing_to_check_is_nothing_checked(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sh": "#!/bin/bash\necho hello\n"})
    code, line, doc = verdict(tmp_path)
    assert code == 1 and line.startswith("gpu-doctor: NOTHING CHECKED on node07: no launch found in job.sh"), line
    assert doc["exit_code"] == 1 and str(doc["not_checked"]).startswith("NOTHING CHECKED")


def test_a_launch_only_known_at_run_time_is_nothing_checked(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sh": "#!/bin/bash\nCMD=$(cat launch.txt)\nsrun $CMD\n"})
    code, line, _doc = verdict(tmp_path)
    assert code == 1 and "NOTHING CHECKED" in line and "job.sh:3: runs '$CMD'" in line, line


def test_a_checked_job_still_passes(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sh": f"#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=3500M\n{WARM}"
                                   "python -m scorep --cuda train.py\n", "train.py": TRAIN})
    code, line, doc = verdict(tmp_path)
    assert code == 0 and line.startswith("gpu-doctor: OK on node07"), line
    assert doc["not_checked"] is None


def test_flat_one_line_ifs_are_not_nesting(tmp_path: Path) -> None:
    flat = 'if [ -n "$DEBUG" ]; then echo debug; fi\n' * 101
    write_job(tmp_path, {"job.sh": f"#!/bin/bash\n{flat}export SCOREP_TOTAL_MEMORY=8G\n"
                                   "python -m scorep --cuda train.py\n", "train.py": TRAIN})
    (out,) = run_check("SCP003", tmp_path)
    assert out.status == Status.FAIL and out.evidence[0].line == 103, out.message


@pytest.mark.parametrize("setter", [
    'eval "export SCOREP_TOTAL_MEMORY=$(cat mem.txt)"',
    'eval "$(cat scorep.env)"',
    "printf -v SCOREP_TOTAL_MEMORY '%s' \"$(cat mem.txt)\"",
    'read -r SCOREP_TOTAL_MEMORY <<< "$(cat mem.txt)"',
    'while read -r k v; do export "$k=$v"; done < scorep.conf',
    "source <(grep -v '^#' scorep.env)",
    "mapfile -t SCOREP_TOTAL_MEMORY < mem.txt",
    'declare -n mem=SCOREP_TOTAL_MEMORY\nmem=$(cat mem.txt)',
])
def test_a_value_set_where_the_reader_cannot_follow_is_unknown_not_the_older_one(tmp_path: Path, setter: str) -> None:
    write_job(tmp_path, {"job.sh": f"#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=3500M\n{setter}\n"
                                   "python -m scorep --cuda train.py\n", "train.py": TRAIN})
    for cid in ("SCP003", "SCP009"):
        statuses = [o.status for o in run_check(cid, tmp_path)]
        assert statuses == [Status.UNKNOWN], (cid, [o.message for o in run_check(cid, tmp_path)])


def test_an_eval_of_known_words_runs_them(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sh": '#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=3500M\nKIND=TOTAL\n'
                                   'eval "export SCOREP_${KIND}_MEMORY=8G"\npython -m scorep --cuda train.py\n',
                         "train.py": TRAIN})
    (out,) = run_check("SCP003", tmp_path)
    assert out.status == Status.FAIL and out.evidence[0].line == 4, out.message


def test_a_dynamic_name_makes_later_unset_variables_unknown_too(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sh": '#!/bin/bash\nwhile read -r k v; do export "$k=$v"; done < scorep.conf\n'
                                   "python -m scorep --cuda train.py\n", "train.py": TRAIN})
    (cmd, _launch), = job_of(tmp_path).instrumented
    var = cmd.var("SCOREP_CUDA_ENABLE")
    assert var is not None and var.value is None and var.site is not None and var.site.line == 2
    assert [o.status for o in run_check("SCP003", tmp_path)] == [Status.UNKNOWN]
    # whether a filter file is set is not known either: not "filtered", not "unfiltered"
    assert Status.UNKNOWN in [o.status for o in run_check("SCP010", tmp_path)]


@pytest.mark.parametrize("line, wrappers", [
    ("srun shifter --image=docker:nvcr.io/nvidia/pytorch:24.05-py3 --module=gpu python -m scorep --cuda train.py",
     ["srun", "shifter"]),
    ("singularity exec --nv --bind /scratch pytorch.sif python -m scorep --cuda train.py", ["singularity"]),
    ("srun apptainer exec --nv --cleanenv pytorch.sif python -m scorep --cuda train.py", ["srun", "apptainer"]),
    ("enroot start --rw -m ./data:/data pytorch python -m scorep --cuda train.py", ["enroot"]),
    ("podman run --rm --gpus all -e SCOREP_TOTAL_MEMORY=8G -v $PWD:/w pytorch:latest python -m scorep --cuda train.py",
     ["podman"]),
])
def test_container_wrappers_are_wrappers_and_the_command_inside_is_the_launch(
        tmp_path: Path, line: str, wrappers: list[str]) -> None:
    write_job(tmp_path, {"job.sh": f"#!/bin/bash\n{line}\n", "train.py": TRAIN})
    (cmd, launch), = job_of(tmp_path).instrumented
    assert [w.name for w in cmd.wrappers] == wrappers and launch.training_target == "train.py"
    if "-e SCOREP_TOTAL_MEMORY=8G" in line:
        assert cmd.env["SCOREP_TOTAL_MEMORY"].value == "8G"
    if "--cleanenv" in line:
        assert "SCOREP_TOTAL_MEMORY" not in cmd.env


def test_a_run_time_srun_option_word_and_an_unknown_command_string_are_noted(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sh": '#!/bin/bash\nARGS=$(cat srun.args)\nCMD=$(cat cmd.txt)\n'
                                   'srun $ARGS bash -c "$CMD"\n'})
    job = job_of(tmp_path)
    texts = [(n.line, n.text) for n in job.notes if n.kind == "unresolved"]
    assert (4, "srun gets '$ARGS', which is only known when the job runs; read as srun's options") in texts
    assert any(line == 4 and "'$CMD'" in text for line, text in texts), texts


def test_a_sub_folder_script_whose_program_is_nowhere_is_not_checked(tmp_path: Path) -> None:
    write_job(tmp_path, {"scripts/train.sbatch": f"#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=3500M\n{WARM}"
                                                 "srun python -m scorep --cuda train.py --config ../resources/a.json\n"})
    code, line, _doc = verdict(tmp_path)
    assert code == 1 and "NOT CHECKED" in line and "does not exist" in line, line


@pytest.mark.parametrize("code", ["import torch; print(torch.cuda.is_available())",
                                  "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)",
                                  "import torch; raise SystemExit(0 if torch.cuda.is_available() else 1)"])
def test_a_readiness_test_in_a_python_c_warm_up_is_read(tmp_path: Path, code: str) -> None:
    write_job(tmp_path, {"job.sh": f"#!/bin/bash\nuntil python -c '{code}' | grep -q True; do sleep 5; done\n"
                                   "python -m scorep --cuda train.py\n", "train.py": TRAIN})
    outs = run_check("SCR004", tmp_path)
    assert [o.status for o in outs] == [Status.FAIL] and outs[0].evidence[0].line == 2, [o.message for o in outs]


def test_ml_of_a_modulefile_in_the_job_folder_reads_its_setenv(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sh": "#!/bin/bash\nmodule use --append modules\nml scorep/8.4\n"
                                   "python -m scorep --cuda train.py\n",
                         "modules/scorep/8.4.lua": 'setenv("SCOREP_TOTAL_MEMORY","4G")\n', "train.py": TRAIN})
    (out,) = run_check("SCP003", tmp_path)
    assert out.status == Status.FAIL and (out.evidence[0].file, out.evidence[0].line) == ("modules/scorep/8.4.lua", 1)


def test_a_run_time_program_after_srun_is_not_read_as_its_options(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sh": "#!/bin/bash\nPY=$(cat python.txt)\nsrun $PY train.py\n"})
    texts = [n.text for n in job_of(tmp_path).notes if n.kind == "unresolved"]
    assert texts == ["runs '$PY', which is only known when the job runs; not followed"], texts


def test_a_quoted_export_of_a_spelled_name_leaves_the_other_values_known(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sh": '#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=8G\n'
                                   'export "LD_LIBRARY_PATH=$CONDA_PREFIX/lib:$LD_LIBRARY_PATH"\n'
                                   "python -m scorep --cuda train.py\n", "train.py": TRAIN})
    (out,) = run_check("SCP003", tmp_path)
    assert out.status == Status.FAIL and out.evidence[0].line == 2, out.message


@pytest.mark.parametrize("setup", ['eval "$(conda shell.bash hook)"', "eval $(ssh-agent)",
                                   'eval "$(/opt/miniforge/bin/conda shell.bash hook)"'])
def test_an_eval_that_sets_up_a_tool_leaves_the_values_known(tmp_path: Path, setup: str) -> None:
    write_job(tmp_path, {"job.sh": f"#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=8G\n{setup}\n"
                                   "python -m scorep --cuda train.py\n", "train.py": TRAIN})
    (out,) = run_check("SCP003", tmp_path)
    assert out.status == Status.FAIL and out.evidence[0].line == 2, out.message


def test_a_sub_folder_torchrun_job_is_read_from_its_own_folder(tmp_path: Path) -> None:
    write_job(tmp_path, {"jobs/run.sh": "#!/bin/bash\ntorchrun --standalone --nproc_per_node=2 train.py\n",
                         "jobs/train.py": TRAIN})
    job = job_of(tmp_path)
    assert [s.problem for s in job.entry_scripts()] == [None]
    assert any(n.kind == "assumed" and "read as run from its own folder (jobs/)" in n.text for n in job.notes)


@pytest.mark.parametrize("loop", ["while [ $rank -lt $N ]; do", "while (( rank < N )); do",
                                  'until [ "$rank" -ge "$N" ]; do', "while [[ $rank -le 2 ]]; do"])
@pytest.mark.parametrize("step", ["rank=$((rank+1))", "((rank++))", "let rank++"])
def test_a_counter_loop_over_ranks_is_per_rank(tmp_path: Path, loop: str, step: str) -> None:
    write_job(tmp_path, {"job.sh": f"#!/bin/bash\nN=3\nrank=0\n{loop}\n"
                                   "    RANK=$rank SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$rank python -m scorep --cuda "
                                   f"train.py &\n    {step}\ndone\nwait\n", "train.py": TRAIN})
    (cmd, _launch), = job_of(tmp_path).instrumented
    assert cmd.loop is not None and cmd.loop.var == "rank" and cmd.loop.count == 3 and cmd.tasks == 3
    assert cmd.env["SCOREP_EXPERIMENT_DIRECTORY"].varies


def test_a_failing_job_that_was_not_all_read_says_both(tmp_path: Path) -> None:
    write_job(tmp_path, {"job.sh": f"#!/bin/bash\n{WARM}python -m scorep --cuda -- train.py\n"})
    code, line, _doc = verdict(tmp_path)
    assert code == 1 and line.startswith("gpu-doctor: FAIL on node07: SCP005 fail: "), line
    assert "; NOT CHECKED: train.py, which job.sh:8 starts, does not exist" in line, line
