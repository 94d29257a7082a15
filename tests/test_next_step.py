"""The reason line's `next:` is a command that does something when pasted: over every held-out
and example broken job folder, the command it names, run as printed, plans a change (a diff),
says why its remedy cannot apply with the manual steps, or explains the check; never "nothing
to change"."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from jobfolder_util import HEALTHY

from doctor.case import Case
from doctor.cli import main
from doctor.remedy.verify import job_check_ids, node_presets, run_job_checks
from doctor.runner import Run, run_checks
from doctor.verdict import reason_line, run_json

FIXTURES = Path(__file__).resolve().parent / "fixtures"
BROKEN = sorted(p for p in (FIXTURES / "heldout").glob("*/broken") if p.is_dir())


def healthy_run(folder: Path) -> Run:
    """The job checks as the gate runs them on a healthy GPU node with Score-P installed (the
    node's facts preset), so the job's own findings lead the reason line."""
    ids = job_check_ids()
    return run_checks(Case(root=folder), ids, budget_s=60, playbook="scorep-ddp", mode="check-only",
                      preset_facts={**node_presets(ids), **HEALTHY})


def next_command(folder: Path) -> str:
    line = reason_line(healthy_run(folder))
    m = re.search(r"; next: (.+)$", line)
    assert m, line
    return m.group(1)


def plans_something(step: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`step`, run as printed, shows a diff, or a remedy that cannot apply with its manual steps,
    or a catalogue entry; never "nothing to change"."""
    argv = shlex.split(step)
    assert argv[0] == "gpu-doctor", step
    capsys.readouterr()
    assert main(argv[1:]) == 0, step
    out = capsys.readouterr()
    said = out.out + out.err
    if argv[1] == "explain":
        assert argv[2] in said and "Remedy" in said, said
        return
    assert argv[1] == "fix" and "--only" in argv, step
    rid = argv[argv.index("--only") + 1]
    assert "nothing to change" not in said and f"{rid}: nothing to do" not in said, (step, said)
    if "--diff" in argv:
        assert re.search(r"^\+\+\+ ", out.out, re.M), (step, said)
    else:  # a remedy that cannot apply here: why, and the exact manual steps
        assert "(cannot apply here)" in said and re.search(r"^ +1\. ", said, re.M), (step, said)


@pytest.mark.slow
@pytest.mark.parametrize("folder", BROKEN, ids=[p.parent.name for p in BROKEN])
def test_the_reason_lines_next_command_run_as_printed_plans_something(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = healthy_run(folder)
    m = re.search(r"; next: (.+)$", reason_line(run))
    assert m, reason_line(run)
    plans_something(m.group(1), capsys)
    step = run_json(run)["diagnosis"]["next"]  # the JSON's `next` too
    if step:
        plans_something(step, capsys)


def test_a_remedy_with_nothing_to_change_is_not_the_next_step(tmp_path: Path) -> None:
    """LNC001 on a launch whose per-rank rewrite cannot be planned: the next step is the listing with
    the manual steps, not a diff that prints "# nothing to change"."""
    from jobfolder_util import write_job

    write_job(tmp_path, {"job.sh": """
        #!/bin/bash
        #SBATCH --nodes=2
        export SCOREP_TOTAL_MEMORY=3500M
        srun python -m scorep --cuda $(which accelerate) launch --num_machines 2 --num_processes 8 train.py
        """, "train.py": "import torch\n"})
    from doctor.diagnosis import diagnose
    from doctor.verdict import next_for

    run = run_job_checks(Case(root=tmp_path))
    lnc001 = next(r for r in run.results if r.check_id == "LNC001")
    step = next_for(lnc001, diagnose(run), run)
    assert step == f"gpu-doctor fix {tmp_path} --only per-rank-launch --unsafe", step
