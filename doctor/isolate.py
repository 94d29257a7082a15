"""Run a probe in a subprocess: own process group, hard timeout, killed as a group.

A broken node's CUDA runtime can hang forever and a bad NVML call can
segfault, so anything that touches a driver or runs user-side code goes
through `run_isolated`.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Isolated:
    """How a subprocess ended. `timed_out` means it was killed at the limit."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    def json(self) -> Any:
        """The last stdout line parsed as JSON (probes print one JSON line)."""
        lines = [ln for ln in self.stdout.splitlines() if ln.strip()]
        if not lines:
            raise ValueError("probe printed nothing")
        return json.loads(lines[-1])


PR_SET_PDEATHSIG = 1
_prctl: Callable[..., int] | None = None


def _libc_prctl() -> Callable[..., int] | None:
    global _prctl
    if _prctl is None:
        try:
            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            _prctl = lambda *_args: -1  # noqa: E731  (not Linux: the other layers still apply)
    return _prctl


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A `preexec_fn` for Popen: the child gets `sig` when the thread that started it dies."""
    parent = os.getpid()
    prctl = _libc_prctl()

    def preexec() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl: nobody will ask
            os._exit(125)

    return preexec


LIVE_GROUPS: set[int] = set()  # process groups of isolated children still being waited for


def kill_live_groups() -> None:
    """Kill every isolated child's group now (the process is leaving without its probe threads)."""
    for pgid in list(LIVE_GROUPS):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_group(proc: subprocess.Popen[Any], sig: int = signal.SIGKILL) -> None:
    """Kill a child's whole process group; ignore an already-gone group."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_isolated(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
                 cwd: str | None = None, stdin_text: str | None = None) -> Isolated:
    """Run argv in a new session with a hard timeout; kill the group on expiry."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env) if env is not None else None,
            cwd=cwd, start_new_session=True, text=True, errors="replace",
            preexec_fn=die_with_parent(),  # killed by the kernel if gpu-doctor is (kill -9)
        )
    except OSError as exc:
        return Isolated(tuple(argv), None, "", f"cannot start {argv[0]}: {exc.strerror or exc}",
                        time.monotonic() - start, False)
    LIVE_GROUPS.add(proc.pid)
    try:
        out, err = proc.communicate(stdin_text, timeout=max(timeout, 0.01))
        timed_out = False
    except subprocess.TimeoutExpired:
        kill_group(proc)
        try:
            out, err = proc.communicate(timeout=2.0)
        except subprocess.TimeoutExpired:  # pipes held open by an unkillable grandchild
            out, err = "", ""
        timed_out = True
    finally:
        # A probe may leave grandchildren in its group even when it exits.
        kill_group(proc)
        LIVE_GROUPS.discard(proc.pid)
    return Isolated(tuple(argv), proc.returncode, out or "", err or "",
                    time.monotonic() - start, timed_out)


def run_followed(argv: Sequence[str], timeout: float, on_stderr_line: Callable[[str], None],
                 env: Mapping[str, str] | None = None, cwd: str | None = None) -> Isolated:
    """`run_isolated`, telling `on_stderr_line` each stderr line as it comes (progress)."""
    import threading

    start = time.monotonic()
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=dict(env) if env is not None else None,
                                cwd=cwd, start_new_session=True, text=True, errors="replace")
    except OSError as exc:
        return Isolated(tuple(argv), None, "", f"cannot start {argv[0]}: {exc.strerror or exc}",
                        time.monotonic() - start, False)
    out: list[str] = []
    err: list[str] = []

    def pump_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err.append(line)
            on_stderr_line(line.rstrip("\n"))

    def pump_stdout() -> None:
        assert proc.stdout is not None
        out.append(proc.stdout.read())

    pumps = [threading.Thread(target=pump, daemon=True) for pump in (pump_stderr, pump_stdout)]
    for pump in pumps:
        pump.start()
    try:
        proc.wait(timeout=max(timeout, 0.01))
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        kill_group(proc)
    for pump in pumps:
        pump.join(timeout=2.0)
    proc.wait()
    return Isolated(tuple(argv), proc.returncode, "".join(out), "".join(err), time.monotonic() - start, timed_out)
