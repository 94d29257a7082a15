"""The launcher's side of the canary: the ranks' environment and the alarm lines they print.

Shell equivalent of what `gpu-doctor launch --canary 10` adds to each rank:

    GPU_DOCTOR_CANARY=10 GPU_DOCTOR_CANARY_DIR=RUN_DIR GPU_DOCTOR_CANARY_TIMEOUT=60 \\
    PYTHONPATH=<gpu-doctor>/doctor/canary/bootstrap:$PYTHONPATH python train.py ...
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

BOOTSTRAP = Path(__file__).resolve().parent / "bootstrap"
MARK = "gpu-doctor canary: "          # the rank side's prefix (gpu_doctor_canary.watch.MARK)
EXIT_CANARY = 3                       # the launch's exit code when replicas differed
ACTIONS = ("fail", "stop", "warn")    # fail: finish, then exit 3; stop: stop the ranks at once; warn: report only
DEFAULT_TIMEOUT_S = 60.0


def rank_env(k: int, timeout_s: float, run_dir: Path, base: Mapping[str, str],
             optimizer_state: bool = False) -> dict[str, str]:
    """What a rank needs for the canary: the bootstrap first on its PYTHONPATH, and the settings."""
    path = [str(BOOTSTRAP)] + [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {"GPU_DOCTOR_CANARY": str(k), "GPU_DOCTOR_CANARY_DIR": str(run_dir),
           "GPU_DOCTOR_CANARY_TIMEOUT": f"{timeout_s:g}", "PYTHONPATH": os.pathsep.join(path)}
    if optimizer_state:
        env["GPU_DOCTOR_CANARY_OPTIMIZER"] = "1"
    return env


def alarm(line: str) -> str | None:
    """The canary's message in a rank's output line, or None."""
    at = line.find(MARK)
    return line[at + len(MARK):].strip() if at >= 0 else None


def is_mismatch(text: str) -> bool:
    return " differs from " in text


class Alarms:
    """The canary lines the ranks printed, each once (several ranks may print the same one)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._seen: set[str] = set()

    def new(self, lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            if MARK not in line:
                continue
            text = alarm(line)
            if text and text not in self._seen:
                self._seen.add(text)
                self.lines.append(text)
                out.append(text)
        return out


def outcome(run_dir: Path, k: int, action: str, world_size: int, timeout_s: float,
            code: int, reason: str) -> tuple[int, str, tuple[str, ...]]:
    """After the run: canary.json written; the exit code and reason with the canary's verdict;
    the summary's canary lines."""
    from doctor.canary import report

    doc = report.merge(run_dir, k, action, world_size, timeout_s)
    try:
        report.write(run_dir, doc)
    except OSError as exc:
        doc["problems"].append(f"cannot write {run_dir / 'canary.json'}: {exc.strerror or exc}")
    lines = tuple(report.summary_lines(doc))
    first = doc["first_mismatch"]
    if first is not None:
        if first["line"] not in reason:
            reason = f"replicas differ: {first['line']}; " + reason
        if action != "warn" and code == 0:
            code = EXIT_CANARY
    return code, reason, lines
