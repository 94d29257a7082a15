"""The observed reading in the gate: on by default for the job playbooks with PATH, never in the
`prologue`/`node` playbooks, off with `--no-observe`; the verdict's JSON says which reading was
used, per process too; `--check-only` stays within `--timeout` whatever the job script does."""

from __future__ import annotations

from pathlib import Path

import pytest
from gate_util import run_gate

from doctor.observe import sandbox

pytestmark = pytest.mark.skipif(sandbox.kind() is None, reason="neither bubblewrap nor unshare works here")

FOREVER = """#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
export SCOREP_TOTAL_MEMORY=3500M
SETTINGS="export SCOREP_EXPERIMENT_DIRECTORY=scorep_run"
eval "$SETTINGS"
srun python -m scorep --cuda train.py
touch "$HOME/observed-marker"
while :; do sleep 0.1; done
"""


def _job(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    (job / "job.sbatch").write_text(FOREVER)
    (job / "train.py").write_text("import torch\n")
    return job


def test_the_gate_observes_the_job_within_its_timeout_and_says_so(fake_node, tmp_path: Path) -> None:
    job = _job(tmp_path)
    env = fake_node("healthy")
    run = run_gate(env, str(job), "--playbook", "scorep-ddp", "--timeout", "6", "-q", tmp_path=tmp_path)
    assert run.seconds < 6 + 4, run.seconds  # the interpreter's start and the node fakes on a busy machine
    assert run.doc is not None, run.stderr
    job_doc = run.doc["job"]
    assert job_doc["reading"].startswith("observed: bash ran the job scripts in a sandbox")
    assert any("job.sbatch still running after" in n for n in job_doc["observed_notes"])
    (script,) = job_doc["processes"]
    (launch,) = script["children"]
    assert launch["read"] == "observed" and script["read"] == "observed"
    # written in the string `eval` runs (line 5); the static reading runs an `eval` of known words in
    # place too, so the two readings agree on it
    assert launch["env_used"]["SCOREP_EXPERIMENT_DIRECTORY"]["line"] == 5
    assert launch["env_used"]["SCOREP_EXPERIMENT_DIRECTORY"]["value"] == "scorep_run"
    assert [d for d in job_doc["differences"] if d["what"] == "env SCOREP_EXPERIMENT_DIRECTORY"] == []
    assert not (Path(env.get("HOME", "/nonexistent")) / "observed-marker").exists()


def test_no_observe_reads_statically_and_says_so(fake_node, tmp_path: Path) -> None:
    job = _job(tmp_path)
    run = run_gate(fake_node("healthy"), str(job), "--playbook", "scorep-ddp", "--no-observe", "-q",
                   tmp_path=tmp_path)
    assert run.doc is not None, run.stderr
    assert run.doc["job"]["reading"] == "static reading only (--no-observe)"
    assert run.doc["job"]["differences"] == []
    assert {p["read"] for p in run.doc["job"]["processes"][0]["children"]} == {"static"}


@pytest.mark.parametrize("playbook", ["prologue", "node"])
def test_the_node_playbooks_never_read_or_run_the_job(playbook: str, fake_node, tmp_path: Path) -> None:
    job = _job(tmp_path)
    run = run_gate(fake_node("healthy"), str(job), "--playbook", playbook, "-q", tmp_path=tmp_path)
    assert run.doc is not None, run.stderr
    assert "job" not in run.doc
    assert run.seconds < 30


def test_the_report_says_how_the_launch_was_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from doctor.cli import main

    job = tmp_path / "job"
    job.mkdir()
    (job / "job.sh").write_text("#!/bin/bash\nMEM=8G\nprintf -v SCOREP_TOTAL_MEMORY '%s' \"$MEM\"\n"
                                "export SCOREP_TOTAL_MEMORY\nsrun -n 2 python -m scorep --cuda train.py\n")
    (job / "train.py").write_text("print('hi')\n")
    out = tmp_path / "report.md"
    assert main(["report", str(job), "-o", str(out), "--no-redact"]) in (0, 1)
    capsys.readouterr()
    text = out.read_text()
    assert "**How gpu-doctor read your launch**\n\nobserved: bash ran the job scripts in a sandbox" in text
    assert "| job.sh:5 | observed | srun -n 2 python -m scorep --cuda train.py |" in text
