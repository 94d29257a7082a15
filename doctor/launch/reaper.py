"""No rank or probe outlives gpu-doctor: children die with their parent, survivors are found.

The first layer, where cgroup v2 lets gpu-doctor make groups: each rank in a cgroup of its own
(`doctor.launch.cgroup`), which no descendant can leave. Elsewhere, and as well:

- `become_subreaper()`: gpu-doctor sets `PR_SET_CHILD_SUBREAPER`, so what a rank orphans (a
  double fork, `setsid`, an exec with an empty environment) is re-parented to gpu-doctor, not
  to init; `sweep_tree()` kills the live ranks' descendants and every such adopted orphan with
  its own descendants, found by process tree (`/proc/*/stat`), and reaps them.

Three more layers, because each misses something the others catch:

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
from collections.abc import Callable
from dataclasses import dataclass

from doctor.isolate import die_with_parent

__all__ = ["become_subreaper", "die_with_parent", "marked", "new_marker", "rank_preexec", "stop_survivors",
           "sweep_tree"]

MARKER = "GPU_DOCTOR_LAUNCH"
PROC = "/proc"
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper(on: bool = True) -> bool:
    """Make gpu-doctor the reaper of its descendants' orphans (Linux 3.4+); False where it cannot.

    `on=False` after the launch's last sweep: an app that stays open adopts nothing more."""
    from doctor.isolate import _libc_prctl

    prctl = _libc_prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0


def rank_preexec(cgroup_procs: str | None) -> Callable[[], None]:
    """A rank's `preexec_fn`: die with the parent, and join its own cgroup first when it has one."""
    die = die_with_parent()

    def preexec() -> None:
        if cgroup_procs is not None:
            try:
                with open(cgroup_procs, "w") as fh:
                    fh.write(str(os.getpid()))
            except OSError:
                pass  # the process-tree sweep still finds what it leaves
        die()

    return preexec


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    name: str
    started: int  # clock ticks after boot (/proc/PID/stat field 22)
    zombie: bool
    group: int  # process group (field 5)


def processes() -> dict[int, ProcInfo]:
    """Every process now, from /proc/*/stat (shell: `ps -eo pid,ppid,comm,lstart`)."""
    out: dict[int, ProcInfo] = {}
    try:
        names = os.listdir(PROC)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{PROC}/{name}/stat", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        head, _, rest = data.rpartition(b")")
        fields = rest.split()
        try:
            out[int(name)] = ProcInfo(int(name), int(fields[1]), head.split(b"(", 1)[-1].decode(errors="replace"),
                                      int(fields[19]), fields[0] == b"Z", int(fields[2]))
        except (IndexError, ValueError):
            continue
    return out


def descendants(roots: set[int], table: dict[int, ProcInfo]) -> list[int]:
    """Every process below `roots` in the tree (not the roots themselves)."""
    children: dict[int, list[int]] = {}
    for p in table.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out: list[int] = []
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out and child not in roots:
                out.append(child)
                todo.append(child)
    return out


def left_running(pid: int, table: dict[int, ProcInfo], groups: frozenset[int] | set[int]) -> bool:
    """A process the ranks left running: alive, and outside the rank groups already killed whole."""
    info = table.get(pid)
    return info is not None and not info.zombie and info.group not in groups


def describe(pid: int, table: dict[int, ProcInfo]) -> str:
    info = table.get(pid)
    return f"pid {pid} ({info.name})" if info else f"pid {pid}"


def sweep_tree(ranks: set[int], since: int, keep: set[int], groups: frozenset[int] | set[int] = frozenset(),
               wait_s: float = 2.0) -> list[str]:
    """Kill the live ranks' descendants and the orphans gpu-doctor adopted from them; reap those.

    `since`: the start tick of the first rank (an adopted orphan is younger); `keep`: children of
    gpu-doctor that are not the launch's (probes); `groups`: the ranks' process groups, already
    killed whole (a member still dying is not named). Returns 'pid N (name)' for each one killed.
    """
    me = os.getpid()
    table = processes()
    adopted = {p.pid for p in table.values() if p.ppid == me and p.started >= since
               and p.pid not in keep and p.pid not in ranks}
    doomed = [p for p in descendants(ranks, table) + list(adopted) + descendants(adopted, table)
              if p not in keep and p != me]
    doomed = list(dict.fromkeys(doomed))
    named = [describe(p, table) for p in doomed if left_running(p, table, groups)]
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + wait_s
    for pid in adopted:  # ours now: reap them, or they stay zombies of gpu-doctor
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.02)
    return named

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
