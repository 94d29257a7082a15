"""Each rank in a cgroup of its own (cgroup v2), so nothing a rank starts outlives the launch.

A process cannot leave its cgroup by `setsid`, a double fork or an empty environment:
`cgroup.procs` lists every process the rank started, and `cgroup.kill` (Linux 5.14+) kills
them all at once. The groups are made under gpu-doctor's own cgroup where it may write there
(root, or a delegated subtree); elsewhere `available` is False and the launch falls back to a
subreaper and a process-tree sweep (`doctor.launch.reaper`).

Shell equivalent: `mkdir $CG/gpu-doctor-ID-0; echo $PID > $CG/gpu-doctor-ID-0/cgroup.procs;
cat .../cgroup.procs; echo 1 > .../cgroup.kill; rmdir ...`.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

MOUNTINFO = "/proc/self/mountinfo"
SELF_CGROUP = "/proc/self/cgroup"


def own_cgroup() -> Path | None:
    """The cgroup v2 folder gpu-doctor runs in, when it can make groups below it."""
    try:
        mounts = Path(MOUNTINFO).read_text().splitlines()
        rel = next((ln[3:] for ln in Path(SELF_CGROUP).read_text().splitlines() if ln.startswith("0::")), None)
    except OSError:
        return None
    mount = next((ln.split(" - ", 1)[0].split()[4] for ln in mounts
                  if " - cgroup2 " in ln), None)
    if mount is None or rel is None:
        return None
    here = Path(mount) / rel.strip().lstrip("/")
    return here if os.access(here, os.W_OK) and (here / "cgroup.procs").exists() else None


class RankCgroups:
    """One cgroup per rank process of a launch: `join_file(n)` for its preexec, `sweep()` at the end."""

    def __init__(self, launch_id: str) -> None:
        self.base = own_cgroup()
        self.prefix = f"gpu-doctor-{launch_id[:12]}"
        self.groups: list[Path] = []

    @property
    def available(self) -> bool:
        return self.base is not None

    def join_file(self, n: int) -> str | None:
        """`cgroup.procs` of process n's new group (the child writes its pid there), or None."""
        if self.base is None:
            return None
        group = self.base / f"{self.prefix}-{n}"
        try:
            group.mkdir(exist_ok=True)
        except OSError:
            self.base = None  # not ours to write after all: the fallback sweeps
            return None
        self.groups.append(group)
        return str(group / "cgroup.procs")

    def members(self) -> list[int]:
        out: list[int] = []
        for group in self.groups:
            try:
                out += [int(p) for p in (group / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                continue
        return out

    def sweep(self, keep: set[int], wait_s: float = 2.0) -> list[int]:
        """Kill every process left in the groups but `keep`; remove the groups. The pids killed."""
        left = [p for p in self.members() if p not in keep]
        for group in self.groups:
            _kill_group(group, keep)
        deadline = time.monotonic() + wait_s
        while [p for p in self.members() if p not in keep] and time.monotonic() < deadline:
            time.sleep(0.05)
        for group in list(self.groups):
            try:
                group.rmdir()  # empty now (a process in `keep` holds it until the next sweep)
                self.groups.remove(group)
            except OSError:
                pass
        return left


def _kill_group(group: Path, keep: set[int]) -> None:
    try:
        pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return
    if pids and not keep.intersection(pids):
        try:
            (group / "cgroup.kill").write_text("1")
            return
        except OSError:
            pass  # before Linux 5.14: one by one
    for pid in pids:
        if pid not in keep:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
