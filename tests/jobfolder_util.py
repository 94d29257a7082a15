"""Helpers for the job-folder tests: write a job folder, parse it, run one check over it."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path
from typing import Any

import examples_util

from doctor import registry
from doctor.case import Case
from doctor.facts import Facts
from doctor.jobfolder.discover import load_job
from doctor.jobfolder.model import Job
from doctor.model import Outcome, Status

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = examples_util.EXAMPLES  # the shipped files, not the working tree's
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "jobs"

# What a healthy node with Score-P installed reports; tests override single facts.
HEALTHY: dict[str, Any] = {
    "scorep_install": {"scorep_config": "/opt/scorep/bin/scorep-config", "version": "Score-P 8.1",
                       "cuda_support": True, "python_bindings": True, "config_summary": "CUDA support: yes",
                       "python": "/usr/bin/python3", "notes": []},
    "framework": {"ok": True, "error": None, "torch_version": "2.1.2", "torch_cuda": "12.1",
                  "device_count": 4, "nccl_version": "2.18.1"},
    "cuda_runtime": {"state": "ready", "ready_attempt": 1, "attempts": [], "last": {}},
    "nvml": {"driver_loaded": True, "error": None, "driver_version": "550.54.15", "cuda_driver_version": 12040,
             "gpus": [{"index": i, "name": "NVIDIA A100-SXM4-40GB", "uuid": f"GPU-{i}", "pci_bus_id": "",
                       "memory_total": 42949672960} for i in range(4)]},
    "logscan": [],
}


def write_job(root: Path, files: dict[str, str | bytes]) -> Path:
    """Write `files` (relative path -> text, dedented) under `root`; return `root`."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content).lstrip("\n"), encoding="utf-8")
    return root


def case_for(root: Path, **kw: Any) -> Case:
    env = kw.pop("env", None)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/home/user"}
    return Case(root=root, env=base if env is None else env, host=kw.pop("host", "node07"), **kw)


def job_of(root: Path, **kw: Any) -> Job:
    return load_job(case_for(root, **kw))


def run_check(check_id: str, root: Path, preset: dict[str, Any] | None = None, **kw: Any) -> list[Outcome]:
    """The outcomes of one check over the job folder `root`, with node facts preset."""
    registry.load()
    facts = Facts(case_for(root, **kw), time.monotonic() + 60, {**HEALTHY, **(preset or {})})
    produced = registry.get_check(check_id).fn(facts)
    return [produced] if isinstance(produced, Outcome) else list(produced)


def worst(outcomes: list[Outcome]) -> Status:
    return max((o.status for o in outcomes), key=lambda s: s.rank)


def bad(outcomes: list[Outcome]) -> list[Outcome]:
    """Outcomes above pass/skip."""
    return [o for o in outcomes if o.status not in (Status.PASS, Status.SKIP)]


def where(outcomes: list[Outcome], status: Status | None = None) -> list[tuple[str | None, int | None]]:
    """(file, line) of every evidence of the outcomes (with `status`, if given)."""
    return [(e.file, e.line) for o in outcomes if status is None or o.status == status for e in o.evidence]


# Every check that reads the job's scripts, from the catalogue: a new check of these layers is covered.
JOB_LAYERS = ("scorep", "launcher", "script", "trainer")
JOB_CHECKS = tuple(c.id for c in registry.all_checks() if c.layer in JOB_LAYERS)
