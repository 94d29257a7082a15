"""What a launch reports: rank states and the events the engine emits.

All values are frozen dataclasses so that the CLI view, the TUI's workers and
tests can hold them across threads. Every event carries `at`, the monotonic
time it was made, so consumers can order and time them.
"""

from __future__ import annotations

import enum
import signal as _signal
import time
from dataclasses import dataclass, field


class RankState(enum.StrEnum):
    """Where a rank is. DONE/FAILED/KILLED are final."""

    PENDING = "pending"      # planned, not started (warm-up still running)
    STARTING = "starting"    # process started, no sign of life yet
    RUNNING = "running"      # printed something or joined the rendezvous
    DONE = "done"            # exited with code 0
    FAILED = "failed"        # exited non-zero, or was killed by a signal it was not sent by us
    KILLED = "killed"        # stopped by the launcher (grace expired, timeout, Ctrl+C)

    @property
    def final(self) -> bool:
        return self in (RankState.DONE, RankState.FAILED, RankState.KILLED)


def signal_name(returncode: int | None) -> str | None:
    """`-15` -> "SIGTERM" (Popen's convention for a child killed by a signal)."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return _signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def shell_code(returncode: int | None) -> int:
    """The exit code a shell would report: a signal N becomes 128+N."""
    if returncode is None:
        return 1
    return 128 - returncode if returncode < 0 else returncode


def _now() -> float:
    return time.monotonic()


@dataclass(frozen=True)
class RankStatus:
    """A snapshot of one rank, as the live view shows it."""

    rank: int
    state: RankState = RankState.PENDING
    pid: int | None = None
    step: int | None = None
    total: int | None = None
    epoch: float | None = None
    loss: float | None = None
    last_line: str = ""
    returncode: int | None = None
    log_path: str = ""
    lines: int = 0
    bytes: int = 0
    node: str = ""              # multi-node launches: the node the rank runs on

    @property
    def signal(self) -> str | None:
        return signal_name(self.returncode)

    @property
    def progress_text(self) -> str:
        parts = []
        if self.step is not None:
            parts.append(f"{self.step}/{self.total}" if self.total else str(self.step))
        if self.epoch is not None:
            parts.append(f"ep {self.epoch:g}")
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4g}")
        return " ".join(parts)


@dataclass(frozen=True)
class RankResult:
    """How one rank ended, for the summary."""

    rank: int
    state: RankState
    returncode: int | None
    pid: int | None
    log_path: str
    last_lines: tuple[str, ...]
    node: str = ""

    @property
    def signal(self) -> str | None:
        return signal_name(self.returncode)

    @property
    def ended_text(self) -> str:
        if self.returncode is None:
            return "never started" if self.pid is None else "unknown"
        if self.signal:
            return f"killed by {self.signal}"
        return f"exit code {self.returncode}"


@dataclass(frozen=True)
class RunSummary:
    """The outcome of a launch. `exit_code` is what `gpu-doctor launch` returns."""

    exit_code: int
    reason: str
    ranks: tuple[RankResult, ...]
    first_failed: int | None
    run_dir: str
    duration_s: float
    world_size: int
    master: str
    stopped_by: str | None = None       # "SIGINT", "rendezvous timeout", "rank 1 failed", ...
    warmup: str | None = None
    leftovers: tuple[str, ...] = ()     # "pid N (name)" of what the ranks left running, killed at the end
    canary: tuple[str, ...] = ()        # --canary: what the replica comparison found (doctor.canary.report)

    def rank(self, n: int) -> RankResult:
        return next(r for r in self.ranks if r.rank == n)


@dataclass(frozen=True)
class RunStarted:
    run_dir: str
    world_size: int
    master: str
    commands: tuple[tuple[str, ...], ...]
    at: float = field(default_factory=_now)


@dataclass(frozen=True)
class Note:
    """A launcher message for people: level is "info", "warn" or "error"."""

    level: str
    text: str
    at: float = field(default_factory=_now)


@dataclass(frozen=True)
class WarmupAttempt:
    attempt: int
    ok: bool
    kind: str          # ready, not_ready, hung, cpu_build, no_device, no_torch
    detail: str
    at: float = field(default_factory=_now)


@dataclass(frozen=True)
class RankStarted:
    rank: int
    pid: int
    argv: tuple[str, ...]
    log_path: str
    at: float = field(default_factory=_now)


@dataclass(frozen=True)
class RankOutput:
    """A batch of complete lines (as a terminal would show them: `\\r` overwrites)."""

    rank: int
    lines: tuple[str, ...]
    at: float = field(default_factory=_now)


@dataclass(frozen=True)
class RankProgress:
    rank: int
    step: int | None
    total: int | None
    epoch: float | None = None
    loss: float | None = None
    at: float = field(default_factory=_now)


@dataclass(frozen=True)
class RankStateChanged:
    rank: int
    state: RankState
    detail: str = ""
    at: float = field(default_factory=_now)


@dataclass(frozen=True)
class RankExited:
    rank: int
    returncode: int | None
    state: RankState
    at: float = field(default_factory=_now)

    @property
    def signal(self) -> str | None:
        return signal_name(self.returncode)


@dataclass(frozen=True)
class RunFinished:
    summary: RunSummary
    at: float = field(default_factory=_now)


@dataclass(frozen=True)
class StallVerdict:
    """No rank advanced for `stalled_s`: what the stall watch found (doctor.hang). `short` is the app's
    line ('rank 1 diverged (DataLoader)'), `verdict` the sentence, `groups` the grouped stacks as
    person-readable lines; `path` the hang.json written before anything stops the ranks."""

    stalled_s: float
    short: str
    verdict: str
    diverged_ranks: tuple[int, ...]
    groups: tuple[str, ...]
    path: str
    requested: bool = False            # sampled on request (the app's key), not by the stall watch
    at: float = field(default_factory=_now)


Event = (RunStarted | Note | WarmupAttempt | RankStarted | RankOutput | RankProgress
         | RankStateChanged | RankExited | RunFinished | StallVerdict)
