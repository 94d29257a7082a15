"""The report carries the last launch's hang verdict (hang.json), redacted like everything else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_util import NO_NODE, empty_playbook

from doctor.report import cli


def test_report_includes_the_hang_verdict_with_the_home_folder_redacted(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home" / "alice"
    job = home / "job"
    run = job / ".gpu-doctor" / "runs" / "20260101-000000"
    run.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    (run / "summary.json").write_text(json.dumps({
        "exit_code": 3, "reason": "stalled 15s: rank 1 diverged (DataLoader); stopped 4 of 4 ranks",
        "ranks": [{"rank": r, "state": "killed", "returncode": -15, "pid": 100 + r, "log_path": str(run / f"rank_{r}.log"),
                   "last_lines": []} for r in range(4)], "first_failed": None, "run_dir": str(run), "duration_s": 30.0,
        "world_size": 4, "master": "127.0.0.1:29500", "stopped_by": "stalled 15s: rank 1 diverged (DataLoader)"}))
    verdict = ("ranks 0, 2, 3 wait in all_reduce (train.py:44, after step 49); rank 1 is in DataLoader.__next__ "
               "(train.py:54, after step 49): rank 1 diverged")
    frames = [{"function": "all_reduce", "file": f"{home}/venv/torch/distributed/distributed_c10d.py", "line": 3252},
              {"function": "train_step", "file": f"{job}/train.py", "line": 44}]
    (run / "hang.json").write_text(json.dumps({
        "diverged_ranks": [1], "verdict": verdict, "collective": {"op": "all_reduce", "ranks": [0, 2, 3]},
        "groups": [{"ranks": [0, 2, 3], "frames": frames, "moving": False, "what": "all_reduce",
                    "where": "train.py:44"},
                   {"ranks": [1], "frames": [{"function": "__getitem__", "file": f"{job}/train.py", "line": 38}],
                    "moving": False, "what": "DataLoader.__next__", "where": "train.py:54"}]}))
    target = tmp_path / "report.md"
    cli.run_report([str(job), "-o", str(target), "--playbook", str(empty_playbook(tmp_path)), "-q"],
                   preset_facts=NO_NODE)
    text = target.read_text()
    assert f"Hang verdict (gpu-doctor launch --stall): {verdict}" in text
    assert "ranks 0, 2, 3 (stuck): all_reduce at train.py:44" in text
    assert "__getitem__ (train.py:38)" in text
    assert str(home) not in text
    doc_target = tmp_path / "report.json"
    cli.run_report([str(job), "-o", str(doc_target), "--playbook", str(empty_playbook(tmp_path)), "-q"],
                   preset_facts=NO_NODE)
    doc = json.loads(doc_target.read_text())
    assert doc["last_launch"]["hang"]["diverged_ranks"] == [1]
    assert str(home) not in doc_target.read_text()
