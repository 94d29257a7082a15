"""Slurm's own drain reasons (`sinfo -R`) beside gpu-doctor's verdicts, each tagged.

Command line equivalent: `sinfo -R -N -h -o '%N|%H|%E'` (one line per node: name, when the
reason was set, the reason). A reason is a *node problem* when gpu-doctor's latest verdict
on that node fails, or when it names the hardware, the Prolog or a health check; a *user
problem* when it names what a job left behind (processes that would not die, a job's own
error); anything else is *unclear*, shown as Slurm wrote it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

SINFO_TIMEOUT_S = 10.0
NODE_WORDS = re.compile(
    r"prolog|gpu|xid|ecc|nvlink|nvswitch|fabric|nhc|health|hardware|not responding|reboot|"
    r"low (real)?memory|gres|dcgm|gpu-doctor|pcie|fan|thermal|power|ib |infiniband|disk|hbm", re.I)
USER_WORDS = re.compile(r"kill task failed|job .*(oom|out of memory|killed)|user|epilog error", re.I)


@dataclass(frozen=True)
class Drain:
    node: str
    reason: str
    since: str
    tag: str  # node problem, user problem, unclear
    why: str


def tag(reason: str, gpu_doctor_fails: bool) -> tuple[str, str]:
    """(tag, why) for one drain reason."""
    if gpu_doctor_fails:
        return "node problem", "gpu-doctor's latest verdict on the node fails"
    if NODE_WORDS.search(reason):
        return "node problem", "the reason names the node's hardware, Prolog or health check"
    if USER_WORDS.search(reason):
        return "user problem", "the reason names what a job left behind"
    return "unclear", "Slurm's reason names neither"


def parse_sinfo(text: str, failing: Mapping[str, bool]) -> list[Drain]:
    out = []
    for line in text.splitlines():
        parts = line.split("|", 2)
        if len(parts) != 3 or not parts[0].strip():
            continue
        node, since, reason = (p.strip() for p in parts)
        t, why = tag(reason, failing.get(node, False))
        out.append(Drain(node, reason, since, t, why))
    return out


def read_drains(failing: Mapping[str, bool], env: Mapping[str, str] | None = None
                ) -> tuple[list[Drain], str | None]:
    """The drained nodes Slurm reports, or ([], why not) where Slurm is not there or does not answer."""
    sinfo = shutil.which("sinfo", path=(env or {}).get("PATH") if env else None)
    if sinfo is None:
        return [], "no sinfo on PATH: Slurm's drain reasons not read"
    try:
        done = subprocess.run([sinfo, "-R", "-N", "-h", "-o", "%N|%H|%E"], capture_output=True, text=True,
                              timeout=SINFO_TIMEOUT_S, env=dict(env) if env is not None else None,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"sinfo -R did not answer ({type(exc).__name__})"
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no output"])[0]
        return [], f"sinfo -R failed: {first}"
    return parse_sinfo(done.stdout, failing), None
