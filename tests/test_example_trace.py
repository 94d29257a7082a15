"""The shipped real measurement (examples/scorep-ddp-trace) works on a fresh clone without Score-P."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from examples_util import EXAMPLES

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = EXAMPLES / "scorep-ddp-trace"


def gpu_doctor(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCOREP_")}
    env["PATH"] = "/usr/bin:/bin"   # no scorep-config, no otf2-print: only the Python readers
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "doctor", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_the_example_holds_one_real_score_p_experiment_per_rank() -> None:
    for rank in (0, 1):
        cfg = (EXAMPLE / f"scorep_rank_{rank}" / "scorep.cfg").read_text()
        assert "SCOREP_TOTAL_MEMORY=256M\n" in cfg and "SCOREP_FILTERING_FILE='scorep.filter'" in cfg
        assert b"Score-P 8.4" in (EXAMPLE / f"scorep_rank_{rank}" / "traces.otf2").read_bytes()   # the creator
    size = sum(f.stat().st_size for f in EXAMPLE.rglob("*") if f.is_file())
    assert size < 1 << 20


def test_timeline_reads_the_real_traces_without_score_p() -> None:
    res = gpu_doctor("timeline", "--json", str(EXAMPLE))
    assert res.returncode == 0, res.stderr
    [run] = json.loads(res.stdout)["runs"]
    assert run["source"] == "trace" and run["ranks"] == 2
    for rank in run["rank_timelines"]:
        assert rank["steps"]["region"] == "user:train_step" and rank["steps"]["count"] == 3


def test_post_run_playbook_passes_on_the_real_traces() -> None:
    res = gpu_doctor("--check-only", "--playbook", "post-run", "--json", str(EXAMPLE))
    assert res.returncode == 0, res.stdout + res.stderr
    status = {c["id"]: c["status"] for c in json.loads(res.stdout)["checks"]}
    assert status == {"ART001": "pass", "ART002": "skip", "ART003": "pass", "ART004": "pass", "ART005": "pass", "ART006": "skip"}
