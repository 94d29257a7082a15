"""The launch's stall watch (`gpu-doctor launch --stall S`): when no rank advanced for S seconds
(no new output, no CPU progress), sample every rank, write hang.json, then wait or stop.

It runs in its own thread beside the engine's watcher, reading the ranks' statuses; sampling
never blocks the engine (its kill timers and rendezvous timeout keep running). The verdict is on
disk before `--stall-action stop` stops anything.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from doctor.atomic import write_atomic
from doctor.hang import verdict as verdicts
from doctor.hang.groups import RankStack
from doctor.hang.sampler import cpu_seconds, sample_ranks
from doctor.launch.events import Event, Note, RankStatus, StallVerdict

PIDS_JSON = "pids.json"
POLL_S = 1.0
CPU_RATE = 0.10          # CPU seconds per second above this: the rank computes (a waiting rank stays below)
CPU_WINDOW_S = 3.0       # over this long
EXIT_STALLED = 3
ACTIONS = ("wait", "stop")


def record_pids(run_dir: Path, statuses: Sequence[RankStatus], srun: bool = False) -> None:
    """pids.json: each rank's pid (and node), for `gpu-doctor hang RUN_DIR` while the launch runs."""
    doc = {"ranks": {str(s.rank): s.pid for s in statuses if s.pid is not None},
           "nodes": {str(s.rank): s.node for s in statuses if s.node}, "srun": srun}
    try:
        write_atomic(run_dir / PIDS_JSON, json.dumps(doc, indent=1).encode())
    except OSError:
        pass


class StallMonitor:
    """`StallMonitor(...).start()`; `sample_now()` from any thread; `close()` at the end of the launch."""

    def __init__(self, stall_s: float, action: str, run_dir: Path, statuses: Callable[[], Sequence[RankStatus]],
                 post: Callable[[Event], None], stop: Callable[[str, int], None],
                 collect: Callable[[dict[int, int]], list[RankStack]] | None = None, source: str = "launch"):
        self.stall_s = stall_s
        self.action = action
        self.run_dir = run_dir
        self._statuses = statuses
        self._post = post
        self._stop = stop
        self._collect = collect
        self.source = source
        self._closed = threading.Event()
        self._wake = threading.Event()
        self._requested = False
        self.verdicts: list[verdicts.Verdict] = []

    def start(self) -> StallMonitor:
        threading.Thread(target=self._loop, name="launch-stall-watch", daemon=True).start()
        return self

    def close(self) -> None:
        self._closed.set()
        self._wake.set()

    def sample_now(self) -> None:
        self._requested = True
        self._wake.set()

    def _live(self) -> list[RankStatus]:
        return [s for s in self._statuses() if s.pid is not None and not s.state.final]

    def _loop(self) -> None:
        seen: dict[int, tuple[int, int]] = {}
        cpu_base: dict[int, tuple[float, float]] = {}   # rank -> (when, CPU seconds) at the window's start
        last_advance = time.monotonic()
        armed = True
        while not self._closed.is_set():
            self._wake.wait(POLL_S)
            self._wake.clear()
            if self._closed.is_set():
                return
            now = time.monotonic()
            live = self._live()
            for st in live:
                advanced = seen.get(st.rank) != (st.lines, st.bytes)
                seen[st.rank] = (st.lines, st.bytes)
                cpu = cpu_seconds(st.pid) if st.pid is not None else None
                base = cpu_base.get(st.rank)
                if cpu is not None and (base is None or now - base[0] >= CPU_WINDOW_S):
                    # A rate over seconds, not a one-poll delta: a waiting rank's odd wake-up (a timer,
                    # the GC) is no progress; a computing rank burns most of a core.
                    advanced |= base is None or (cpu - base[1]) / (now - base[0]) > CPU_RATE
                    cpu_base[st.rank] = (now, cpu)
                if advanced:
                    last_advance = now
                    armed = True
            requested, self._requested = self._requested, False
            stalled = now - last_advance
            if live and (requested or (armed and self.stall_s > 0 and stalled >= self.stall_s)):
                armed = False
                self._diagnose(live, stalled, requested)

    def _diagnose(self, live: list[RankStatus], stalled: float, requested: bool) -> None:
        pids = {s.rank: s.pid for s in live if s.pid is not None}
        by_rank = {s.rank: s for s in self._statuses()}
        if self._collect is not None:
            stacks = self._collect(pids)
        else:
            stacks = sample_ranks(pids, outputs=lambda: {s.rank: s.lines for s in self._statuses()},
                                  steps={r: s.step for r, s in by_rank.items()},
                                  nodes={r: s.node for r, s in by_rank.items()})
        if self._closed.is_set() and not stacks:
            return
        verdict = verdicts.judge(stacks, self.source, stalled_s=stalled)
        from doctor.hang.flight import read_run

        flight = read_run(self.run_dir)   # NCCL ranks dump on their watchdog's timeout (--flight-recorder)
        if flight is not None:
            verdict = verdicts.with_flight_recorder(verdict, flight)
        try:
            path = str(verdicts.write(self.run_dir, verdict, stacks))
        except OSError as exc:
            path = ""
            self._post(Note("error", f"cannot write {self.run_dir / verdicts.HANG_JSON}: {exc.strerror or exc}"))
        self.verdicts.append(verdict)
        head = "sampled on request" if requested else f"stalled {duration_text(stalled)}"
        self._post(Note("warn", f"{head}: {verdict.verdict}" + (f" (saved {path})" if path else "")))
        self._post(StallVerdict(stalled, verdict.short, verdict.verdict, verdict.diverged_ranks,
                                tuple(verdicts.group_lines(verdict.groups)), path, requested))
        if self.action == "stop" and not requested:
            self._stop(f"stalled {duration_text(stalled)}: {verdict.short}", EXIT_STALLED)


def duration_text(seconds: float) -> str:
    """'15s', '5m', '1h 2m'."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    return f"{s // 3600}h {s % 3600 // 60}m"


def attach(launcher: Any) -> StallMonitor | None:
    """The launch engine's hook, after the ranks were started: pids.json, and the stall watch
    (`spec.stall_s` > 0). Under srun the ranks run on other nodes: the job sampler reads them there."""
    spec = launcher.spec
    srun = bool(spec.slurm_hosts)
    record_pids(launcher.run_dir, launcher.statuses(), srun)
    if not spec.stall_s:
        return None
    collect = None
    if srun:
        from doctor.hang.job import collector

        collect = collector(spec.base_env().get("SLURM_JOB_ID", ""), spec.base_env(),
                            steps=lambda: {s.rank: s.step for s in launcher.statuses()})
    return StallMonitor(spec.stall_s, spec.stall_action, launcher.run_dir, launcher.statuses,
                        launcher._post, launcher.stop, collect).start()
