"""No rank or probe outlives gpu-doctor: children die with their parent, survivors are found.

Three layers, because each misses something the others catch:

- `die_with_parent()`: a `preexec_fn` that sets `PR_SET_PDEATHSIG` (SIGKILL), so a rank or a
  probe child is killed by the kernel when the gpu-doctor thread that started it dies, even by
  `kill -9` (which runs no cleanup of ours). It also exits at once if the parent died before
  the flag was set.
- Process-group kills on every exit path (the engine and `doctor.isolate` already do them).
- `stop_survivors(marker)`: at the end of a launch, every process still carrying the launch's
  marker in its environment (`GPU_DOCTOR_LAUNCH=<id>`, inherited by everything a rank starts)
  is killed: a `setsid` grandchild has left the rank's process group and escaped the group
  kill, but it cannot drop an environment variable it does not know about.

Shell equivalent of the survivor check: `grep -l GPU_DOCTOR_LAUNCH=<id> /proc/*/environ`.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

from doctor.isolate import die_with_parent

__all__ = ["die_with_parent", "marked", "new_marker", "stop_survivors"]

MARKER = "GPU_DOCTOR_LAUNCH"
PROC = "/proc"

def new_marker() -> str:
    return uuid.uuid4().hex


def marked(env: dict[str, str], marker: str) -> dict[str, str]:
    """`env` with the launch's marker, which every descendant of a rank inherits."""
    return {**env, MARKER: marker}


def carriers(marker: str) -> list[int]:
    """Pids of live processes (not this one) whose environment holds MARKER=marker."""
    needle = f"{MARKER}={marker}".encode()
    me = os.getpid()
    found = []
    try:
        names = os.listdir(PROC)
    except OSError:
        return []
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"{PROC}/{name}/environ", "rb") as fh:
                data = fh.read(1 << 20)
            with open(f"{PROC}/{name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != b"Z" and needle in data.split(b"\0"):
            found.append(int(name))
    return found


def stop_survivors(marker: str, wait_s: float = 2.0) -> list[int]:
    """Kill every process still carrying `marker`; returns the pids that had survived."""
    survivors = carriers(marker)
    for pid in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + wait_s
    while survivors and carriers(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return survivors
