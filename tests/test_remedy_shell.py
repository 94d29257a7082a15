"""Job-script edits: exact spans, the file's own form (CRLF, tabs, no final newline, comments) kept.

The findings are what the real checks raise on each folder (`remedy_util.raised`), so a check and
its remedy cannot drift apart here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from remedy_util import DROPPED_LOG, NEVER_READY, raised

from doctor.case import Case
from doctor.jobfolder.scorep_values import format_size, parse_cuda_enable, proposed_cuda_buffer
from doctor.model import Finding
from doctor.remedy import make_plan
from doctor.remedy.diff import unified_diff


def planned(job: Path, *findings: Finding) -> dict[str, bytes]:
    plan = make_plan(Case(root=job), list(findings))
    assert plan.files, [(r.remedy_id, r.status, r.note) for r in plan.remedies]
    return {t.path.name: t.after for t in plan.files}


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


CRLF_SCRIPT = (b"#!/bin/bash\r\n#SBATCH --gres=gpu:4\r\n\r\n# memory for CUDA traces\r\n"
               b"export SCOREP_TOTAL_MEMORY=\"4G\"   # too much?\r\n"
               b"export SCOREP_CUDA_ENABLE=kernels,memcopy,sync\r\n"
               b"python -m scorep --thread=pthread -- train.py --lr 0.1\r\n")


def test_crlf_script_keeps_crlf_and_comments_and_gets_crlf_lines(tmp_path: Path) -> None:
    write(tmp_path, "job.sh", CRLF_SCRIPT)
    write(tmp_path, "slurm-1.out", DROPPED_LOG.encode())
    after = planned(tmp_path, *raised(tmp_path, "SCP002", "SCP003", "SCP004", "SCP005", "SCP007"))["job.sh"]
    assert after == (b"#!/bin/bash\r\n#SBATCH --gres=gpu:4\r\n\r\n# memory for CUDA traces\r\n"
                     b"export SCOREP_TOTAL_MEMORY=\"3500M\"   # too much?\r\n"
                     b"export SCOREP_CUDA_ENABLE=kernel,memcpy,sync\r\n"
                     b"export SCOREP_CUDA_BUFFER=64M\r\n"
                     b"python -m scorep --cuda --thread=pthread train.py --lr 0.1\r\n")


def test_tabs_and_missing_final_newline_survive(tmp_path: Path) -> None:
    text = (b"#!/bin/bash\nif [[ -n \"$SLURM_JOB_ID\" ]]; then\n\texport SCOREP_TOTAL_MEMORY=5g\n"
            b"\tpython -m scorep\t--cuda\ttrain.py\nfi")
    write(tmp_path, "run.sh", text)
    write(tmp_path, "slurm-1.out", DROPPED_LOG.encode())
    after = planned(tmp_path, *raised(tmp_path, "SCP003", "SCP004"))["run.sh"]
    assert after == (b"#!/bin/bash\nif [[ -n \"$SLURM_JOB_ID\" ]]; then\n\texport SCOREP_TOTAL_MEMORY=3500M\n"
                     b"\texport SCOREP_CUDA_BUFFER=64M\n\tpython -m scorep\t--cuda\ttrain.py\nfi")


def test_warmup_goes_before_the_loop_that_launches_the_ranks(tmp_path: Path) -> None:
    text = (b"#!/bin/bash\npids=()\nfor r in 0 1; do\n    RANK=$r SCOREP_EXPERIMENT_DIRECTORY=out "
            b"python -m scorep --cuda train.py &\n    pids+=($!)\ndone\nwait\n")
    write(tmp_path, "ranks.sh", text)
    after = planned(tmp_path, *raised(tmp_path, "LNC002", "SCP006"))["ranks.sh"].decode()
    lines = after.splitlines()
    loop = lines.index("for r in 0 1; do")
    assert "# gpu-doctor: cuda-warmup" in lines[2] and loop > 20
    assert "torch.zeros(1).cuda()" in after
    assert "    RANK=$r SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_${r} python -m scorep --cuda train.py &" in lines
    assert after.endswith("    pids+=($!)\ndone\nwait\n")


def test_per_rank_dirs_added_as_a_prefix_when_unset(tmp_path: Path) -> None:
    write(tmp_path, "ranks.sh", b"for i in $(seq 0 3); do\n  RANK=$i python -m scorep x.py &\ndone\n")
    after = planned(tmp_path, *raised(tmp_path, "SCP006"))["ranks.sh"]
    assert after == (b"for i in $(seq 0 3); do\n  SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_${i} "
                     b"RANK=$i python -m scorep x.py &\ndone\n")


def test_dashdash_alone_on_a_continued_line_goes_with_its_line(tmp_path: Path) -> None:
    write(tmp_path, "job.sh", b"python -m scorep --cuda \\\n    -- \\\n    train.py --x 1\n")
    after = planned(tmp_path, *raised(tmp_path, "SCP005"))["job.sh"]
    assert after == b"python -m scorep --cuda \\\n    train.py --x 1\n"


@pytest.mark.parametrize("before,after", [
    (b"  --load_best_model_at_end True \\\n", b"  --load_best_model_at_end False \\\n"),
    (b"  --load_best_model_at_end=true \\\n", b"  --load_best_model_at_end=False \\\n"),
    (b"  --load_best_model_at_end \\\n", b"  --load_best_model_at_end False \\\n"),
    (b"  --load-best-model-at-end \\\n", b"  --load-best-model-at-end False \\\n"),
])
def test_trainer_flag_turned_off_in_every_spelling(tmp_path: Path, before: bytes, after: bytes) -> None:
    head = b"python -m scorep --cuda train.py \\\n  --evaluation_strategy no \\\n"
    write(tmp_path, "job.sh", head + before + b"  --max_steps 50\n")
    got = planned(tmp_path, *raised(tmp_path, "TRN001"))["job.sh"]
    assert got == head + after + b"  --max_steps 50\n"


@pytest.mark.parametrize("launch,name,before,after", [
    (b"python -m scorep --cuda train.py args.json\n", "args.json",
     b'{\n  "load_best_model_at_end": true,\n  "eval_strategy": "no"\n}',
     b'{\n  "load_best_model_at_end": false,\n  "eval_strategy": "no"\n}'),
    (b"python -m scorep --cuda train.py --config args.yaml\n", "args.yaml",
     b"# diagnostic run\nload_best_model_at_end: True  # keep?\n",
     b"# diagnostic run\nload_best_model_at_end: False  # keep?\n"),
    (b"python -m scorep --cuda train.py\n", "train.py",
     b"args = TrainingArguments(\n    load_best_model_at_end=True,  # why\n)\n",
     b"args = TrainingArguments(\n    load_best_model_at_end=False,  # why\n)\n"),
])
def test_trainer_flag_in_json_yaml_and_python(tmp_path: Path, launch: bytes, name: str, before: bytes,
                                              after: bytes) -> None:
    write(tmp_path, "job.sh", launch)
    write(tmp_path, name, before)
    assert planned(tmp_path, *raised(tmp_path, "TRN001"))[name] == after


def test_exclude_node_extends_or_adds_the_sbatch_line(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    write(a, "a.sbatch", b"#!/bin/bash\n#SBATCH -N 1\n#SBATCH --exclude=node01\n\nsrun hostname\n")
    got = planned(a, *raised(a, "LNC003", host="node17", cuda_runtime=NEVER_READY))
    assert got["a.sbatch"] == b"#!/bin/bash\n#SBATCH -N 1\n#SBATCH --exclude=node01,node17\n\nsrun hostname\n"
    write(b, "b.sbatch", b"#!/bin/bash\n#SBATCH -N 1\n\n#SBATCH --nodes=1\nsrun hostname\n")
    got = planned(b, *raised(b, "LNC003", host="node17", cuda_runtime=NEVER_READY))
    assert got["b.sbatch"] == b"#!/bin/bash\n#SBATCH -N 1\n\n#SBATCH --nodes=1\n#SBATCH --exclude=node17\nsrun hostname\n"


def test_exclude_node_takes_the_host_of_a_failed_gpu003(tmp_path: Path) -> None:
    sb = write(tmp_path, "job.sbatch", b"#!/bin/bash\n#SBATCH -N 1\npython -m scorep --cuda t.py\n")
    gpu003 = raised(tmp_path, "GPU003", host="gpu-n7", cuda_runtime=NEVER_READY)
    plan = make_plan(Case(root=tmp_path, launch=(sb,)), gpu003, only=["exclude-node"])
    assert plan.files[0].after == b"#!/bin/bash\n#SBATCH -N 1\n#SBATCH --exclude=gpu-n7\npython -m scorep --cuda t.py\n"


def test_unparseable_bash_still_located_line_by_line(tmp_path: Path) -> None:
    text = (b"#!/bin/bash\ndeclare -a ranks=(0 1)\ncase $1 in\n  dry) exit 0;;\nesac\n"
            b"x=$(( 1 + 2 ))\nexport SCOREP_TOTAL_MEMORY=4G SCOREP_CUDA_ENABLE=kernel\npython -m scorep train.py\n")
    write(tmp_path, "job.sh", text)
    after = planned(tmp_path, *raised(tmp_path, "SCP003", "SCP002"))["job.sh"]
    assert after == text.replace(b"=4G", b"=3500M").replace(b"-m scorep", b"-m scorep --cuda")


def test_values_it_cannot_know_are_left_alone(tmp_path: Path) -> None:
    write(tmp_path, "job.sh", b"export SCOREP_TOTAL_MEMORY=$MEM\npython -m scorep --cuda train.py\n")
    [unknown] = raised(tmp_path, "SCP003")
    assert unknown.status.value == "unknown" and unknown.remedies == ()  # no value proposed for $MEM
    plan = make_plan(Case(root=tmp_path), [unknown])
    assert plan.files == () and plan.remedies == ()


@pytest.mark.parametrize("proposal,size", [(8889000, "64M"), (1048577, "8M"), (16 << 20, "64M"),
                                           ((16 << 20) + 1, "128M"), (None, "64M")])
def test_cuda_buffer_is_a_power_of_two_mib_four_times_the_proposal(proposal: int | None, size: str) -> None:
    assert format_size(proposed_cuda_buffer(proposal)) == size


@pytest.mark.parametrize("value,fixed", [("kernels,memcopy,sync", "kernel,memcpy,sync"),
                                         ("kernel:bogus", "kernel"), ("nonsense", "default"),
                                         ("kernel;~idle", "kernel;~idle")])
def test_cuda_enable_entries_corrected(value: str, fixed: str) -> None:
    assert parse_cuda_enable(value).proposed() == fixed


def test_unified_diff_marks_a_missing_final_newline_and_new_files() -> None:
    diff = unified_diff(b"a\nb", b"a\nc", "x.sh")
    assert diff.splitlines()[-5:] == [" a", "-b", "\\ No newline at end of file", "+c",
                                      "\\ No newline at end of file"]
    assert unified_diff(b"a\n", b"a", "y.sh").splitlines()[-3:] == ["-a", "+a", "\\ No newline at end of file"]
    created = unified_diff(None, b"hello\n", "new.sh")
    assert created.startswith("--- /dev/null\n+++ b/new.sh\n@@ -0,0 +1 @@\n+hello\n")
