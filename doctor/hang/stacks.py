"""One rank's stack, sampled with py-spy, or the reason it could not be sampled.

Command line equivalent: `py-spy dump --pid PID --json --nonblocking` (`--native` for a thread
that holds the GIL in C code: py-spy then pauses the process for the length of one sample).
The sampler runs with the user's own rights: a launch's own children can be traced (ptrace of
one's children), a stranger's process needs root or CAP_SYS_PTRACE.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor.isolate import die_with_parent

SAMPLE_TIMEOUT_S = 10.0
PY_SPY = "py-spy"


@dataclass(frozen=True)
class Frame:
    """One frame, as py-spy names it: the function's qualified name, the file, the line."""

    function: str
    file: str
    line: int

    @property
    def where(self) -> str:
        return f"{Path(self.file).name}:{self.line}"

    def to_json(self) -> dict[str, Any]:
        return {"function": self.function, "file": self.file, "line": self.line}


@dataclass(frozen=True)
class Thread:
    """One thread's frames, innermost first (py-spy's order)."""

    thread_id: int
    name: str
    owns_gil: bool
    active: bool
    frames: tuple[Frame, ...]
    os_thread_id: int = 0


@dataclass(frozen=True)
class Sample:
    """One rank's stack at one moment; `reason` says why there is none."""

    rank: int
    pid: int
    at: float
    threads: tuple[Thread, ...] = ()
    reason: str | None = None
    native: bool = False
    node: str = ""
    raw: str = field(default="", repr=False)

    @property
    def ok(self) -> bool:
        return self.reason is None and bool(self.threads)

    @property
    def main(self) -> Thread | None:
        """The thread the verdict reads: the main thread, else the one holding the GIL, else the first."""
        for pick in (lambda t: t.os_thread_id == self.pid, lambda t: t.name == "MainThread",
                     lambda t: t.owns_gil, lambda t: True):
            for t in self.threads:
                if pick(t) and t.frames:
                    return t
        return None

    @property
    def frames(self) -> tuple[Frame, ...]:
        main = self.main
        return main.frames if main else ()


def py_spy_path() -> str | None:
    """py-spy beside this interpreter (a venv's bin/), else on PATH."""
    beside = Path(sys.executable).with_name(PY_SPY)
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(PY_SPY)


def parse_dump(text: str) -> tuple[Thread, ...]:
    """py-spy's `dump --json`: a list of threads, each with frames {name, filename, line, ...}."""
    doc = json.loads(text)
    threads = []
    for t in doc if isinstance(doc, list) else []:
        frames = tuple(Frame(str(f.get("name", "?")), str(f.get("filename") or f.get("short_filename") or "?"),
                             int(f.get("line") or 0))
                       for f in t.get("frames", []) if isinstance(f, dict))
        threads.append(Thread(int(t.get("thread_id") or 0), str(t.get("thread_name") or ""),
                              bool(t.get("owns_gil")), bool(t.get("active")), frames,
                              int(t.get("os_thread_id") or 0)))
    return tuple(threads)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return Path(f"/proc/{pid}").exists()


def why_not(pid: int, stderr: str, code: int) -> str:
    """py-spy's failure in the user's words."""
    text = " ".join(stderr.split())
    if not _alive(pid):
        return f"process {pid} is gone (it ended before it could be sampled)"
    low = text.lower()
    if "permission" in low or "operation not permitted" in low or "eperm" in low:
        return (f"no permission to trace process {pid} (ptrace): run gpu-doctor as the job's user, "
                "or as root; kernel.yama.ptrace_scope=1 allows only a process's own children")
    if "failed to find python interpreter" in low or "not a python" in low or "python version" in low:
        return f"process {pid} is not a Python interpreter py-spy can read ({text[:160]})"
    return f"py-spy could not sample process {pid} (exit {code}): {text[:200] or 'no message'}"


def sample(pid: int, rank: int, native: bool = False, timeout: float = SAMPLE_TIMEOUT_S,
           py_spy: str | None = None, node: str = "") -> Sample:
    """One sample of `pid`. Never raises: a failure is the Sample's `reason`.

    Without `native` py-spy reads the process's memory without stopping it (`--nonblocking`);
    with it, py-spy pauses the process for the one sample (native unwinding needs that)."""
    now = time.time()
    tool = py_spy or py_spy_path()
    if tool is None:
        return Sample(rank, pid, now, reason="py-spy is not installed (pip install py-spy; gpu-doctor "
                                            "depends on it): cannot sample the ranks' stacks", node=node)
    if not _alive(pid):
        return Sample(rank, pid, now, reason=f"process {pid} is gone (it ended before it could be sampled)",
                      node=node)
    argv = [tool, "dump", "--pid", str(pid), "--json", *(["--native"] if native else ["--nonblocking"])]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              preexec_fn=die_with_parent(), errors="replace")
    except subprocess.TimeoutExpired:
        return Sample(rank, pid, now, reason=f"py-spy did not answer within {timeout:g} s for process {pid}",
                      native=native, node=node)
    except OSError as exc:
        return Sample(rank, pid, now, reason=f"cannot run {tool}: {exc.strerror or exc}", node=node)
    if done.returncode != 0:
        return Sample(rank, pid, now, reason=why_not(pid, done.stderr, done.returncode), native=native,
                      node=node, raw=done.stderr)
    try:
        threads = parse_dump(done.stdout)
    except (ValueError, TypeError) as exc:
        return Sample(rank, pid, now, reason=f"py-spy's output for process {pid} is not JSON ({exc})",
                      native=native, node=node, raw=done.stdout[:4000])
    if not any(t.frames for t in threads):
        return Sample(rank, pid, now, threads, reason=f"process {pid} has no Python frames (not started yet, "
                                                       "or exiting)", native=native, node=node, raw=done.stdout)
    return Sample(rank, pid, now, threads, native=native, node=node, raw=done.stdout)


def holds_gil_in_c(s: Sample) -> bool:
    """The sampled thread holds the GIL: it runs C code that never released it (a ctypes.PyDLL
    call, an extension without Py_BEGIN_ALLOW_THREADS). Its native frames say where."""
    main = s.main
    return bool(main and main.owns_gil)


def sample_to_json(s: Sample) -> dict[str, Any]:
    return {"rank": s.rank, "pid": s.pid, "node": s.node, "at": s.at, "native": s.native, "reason": s.reason,
            "threads": [{"thread_id": t.thread_id, "os_thread_id": t.os_thread_id, "name": t.name,
                         "owns_gil": t.owns_gil, "active": t.active,
                         "frames": [f.to_json() for f in t.frames]} for t in s.threads]}


def sample_from_json(doc: dict[str, Any]) -> Sample:
    """A Sample sent by the per-node sampler (`doctor.hang.job`)."""
    threads = tuple(Thread(int(t.get("thread_id", 0)), str(t.get("name", "")), bool(t.get("owns_gil")),
                           bool(t.get("active")),
                           tuple(Frame(str(f["function"]), str(f["file"]), int(f["line"])) for f in t.get("frames", [])),
                           int(t.get("os_thread_id", 0)))
                    for t in doc.get("threads", []))
    return Sample(int(doc["rank"]), int(doc["pid"]), float(doc.get("at", 0.0)), threads, doc.get("reason"),
                  bool(doc.get("native")), str(doc.get("node", "")))
