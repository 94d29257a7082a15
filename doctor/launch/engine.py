"""The launch engine: start the ranks, watch them, stop them, report.

Threads, not asyncio: per process one reader thread (pipe -> log file ->
lines) and one waiter thread (exit -> reap), one supervisor thread (warm-up,
spawn, grace period, rendezvous timeout, TERM/KILL) and one dispatcher
thread that delivers events in order. So the engine works the same from a
plain script, from threads, and from asyncio (`subscribe_async`).

Children never block on their pipe: readers do nothing but read, write the
log and hand lines to the dispatcher; when a consumer falls behind, the view
loses lines (counted, with a marker), never the log.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import select
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from doctor.canary.launch import EXIT_CANARY, Alarms, is_mismatch
from doctor.canary.launch import outcome as canary_outcome
from doctor.hang import monitor as hang_monitor
from doctor.launch import ifname, placement, reaper, rendezvous, slurm
from doctor.launch.cgroup import RankCgroups
from doctor.launch.events import (
    Event,
    Note,
    RankExited,
    RankOutput,
    RankProgress,
    RankResult,
    RankStarted,
    RankState,
    RankStateChanged,
    RankStatus,
    RunFinished,
    RunStarted,
    RunSummary,
    WarmupAttempt,
    shell_code,
)
from doctor.launch.output import LineSplitter
from doctor.launch.progress import Progress, merge_progress, parse_progress
from doctor.launch.spec import (
    LaunchSpec,
    RankPlan,
    default_run_dir,
    experiment_path,
    free_port,
    job_folder,
    plan_ranks,
    rank_command,
)
from doctor.launch.warmup import WarmupResult, run_warmup
from doctor.wording import count

CHUNK = 1 << 20
MAX_BACKLOG = 2000          # queued events before the view starts losing output lines
TAIL_LINES = 20
RENDEZVOUS_POLL_S = 0.25
EXIT_RENDEZVOUS_TIMEOUT = 124
EXIT_WARMUP_FAILED = 1


def _wanted(ev: Event, rank: int | None) -> bool:
    """Events of `rank` (all when None); RunFinished always, so every stream ends."""
    return rank is None or isinstance(ev, RunFinished) or getattr(ev, "rank", None) == rank


@dataclass
class _Proc:
    """One OS process: a local rank, or the `srun` step that carries all ranks."""

    argv: tuple[str, ...]
    ranks: tuple[int, ...]
    demux: bool = False
    popen: subprocess.Popen[bytes] | None = None
    term_sent: bool = False
    exited: bool = False
    abandon: bool = False
    reader_done: threading.Event = field(default_factory=threading.Event)


class Launcher:
    """Launch `spec`: `Launcher(spec, on_event).start()`, then `wait()` for the summary.

    Thread-safe: `on_event` is called from the dispatcher thread, one event at a
    time, in order. `stop()` may be called from any thread; `signal_stop()` from
    a signal handler. Subscribe (`subscribe()` / `subscribe_async()`) before `start()`.
    """

    def __init__(self, spec: LaunchSpec, on_event: Callable[[Event], None] | None = None):
        self.spec = spec
        self.run_dir = Path(spec.run_dir) if spec.run_dir else default_run_dir(job_folder(spec))
        self.master_port = spec.master_port or 0
        self.plans: list[RankPlan] = []
        self.summary: RunSummary | None = None
        self.warmup_result: WarmupResult | None = None
        self._sinks: list[Callable[[Event], None]] = [on_event] if on_event else []
        self._lock = threading.Lock()
        self._status = {r: RankStatus(r) for r in range(spec.world_size)}
        self._tails: dict[int, deque[str]] = {r: deque(maxlen=TAIL_LINES) for r in self._status}
        self._logs: dict[int, Any] = {}
        self._dropped: dict[int, int] = {}
        self._procs: list[_Proc] = []
        self._events: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self._inbox: queue.SimpleQueue[_Proc] = queue.SimpleQueue()
        self._stop_request: tuple[str, int] | None = None
        self._force_kill = False
        self._stopping: tuple[str, int] | None = None
        self._first_failed: int | None = None
        self._ended_at: dict[int, float] = {}
        self._task_codes: dict[int, int] = {}     # srun mode: per-task exit codes srun reported
        self._nodes: dict[int, str] = {}          # srun mode: rank -> node
        self._marks_joined: set[int] = set()      # srun mode: ranks whose task saw them join
        self._reach: dict[int, placement.RendezvousMark] = {}   # srun mode: latest reachability
        self._failed_nodes: list[str] = []        # srun mode: nodes Slurm reported failed
        self._done = threading.Event()
        self._started = False
        self._t0 = 0.0
        self.master = ""
        self.marker = reaper.new_marker()  # in every rank's environment: finds its descendants
        self._cgroups = RankCgroups(self.marker)  # one per rank process where cgroup v2 allows
        self._first_tick: int | None = None  # when the first rank started (orphans are younger)
        self.leftovers: list[str] = []  # 'pid N (name)' of what the ranks left running, killed
        self.canary = Alarms()                 # --canary: the alarm lines the ranks printed
        self._stall: hang_monitor.StallMonitor | None = None   # --stall: doctor.hang's watch

    # ---- public API -------------------------------------------------------------------------

    def start(self) -> Launcher:
        if self._started:
            raise RuntimeError("a Launcher starts once")
        self._started = True
        self._t0 = time.monotonic()
        reaper.become_subreaper()  # orphans of the ranks come to us, not to init (the sweep finds them)
        threading.Thread(target=self._dispatch, name="launch-dispatch", daemon=True).start()
        threading.Thread(target=self._supervise, name="launch-supervisor", daemon=True).start()
        return self

    def __enter__(self) -> Launcher:
        return self

    def __exit__(self, *exc: object) -> None:
        """Leaving the block stops whatever still runs: no rank outlives its launcher."""
        if self._started and not self._done.is_set():
            self.stop("the launcher was closed")
            self.wait()

    def run(self) -> RunSummary:
        """start() and wait() in one call."""
        self.start()
        summary = self.wait()
        assert summary is not None
        return summary

    def wait(self, timeout: float | None = None) -> RunSummary | None:
        """The summary once every rank has ended and every event was delivered."""
        return self.summary if self._done.wait(timeout) else None

    def stop(self, reason: str = "stopped on request", exit_code: int = 130) -> None:
        """Stop every rank (SIGTERM to its process group, SIGKILL after `kill_after_s`)."""
        if self._stop_request is None:
            self._stop_request = (reason, exit_code)

    def signal_stop(self, signum: int) -> None:
        """For a signal handler: only assignments, no locks. A second signal kills at once."""
        if self._stop_request is None:
            self._stop_request = (f"interrupted by {signal.Signals(signum).name}", 128 + signum)
        else:
            self._force_kill = True

    def statuses(self) -> tuple[RankStatus, ...]:
        with self._lock:
            return tuple(self._status[r] for r in sorted(self._status))

    def pids(self) -> dict[int, int]:
        return {r: s.pid for r, s in self._status.items() if s.pid is not None}

    def subscribe(self, rank: int | None = None) -> Iterator[Event]:
        """A blocking iterator over every event (or one rank's and RunFinished), ending after RunFinished."""
        q: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self.add_sink(lambda ev: q.put(ev) if _wanted(ev, rank) else None)

        def iterate() -> Iterator[Event]:
            while True:
                ev = q.get()
                yield ev
                if isinstance(ev, RunFinished):
                    return
        return iterate()

    def subscribe_async(self, rank: int | None = None) -> AsyncIterator[Event]:
        """An async iterator over every event, or one rank's (call inside the event loop).

        One subscription per rank gives the TUI its one async worker per rank.
        """
        loop = asyncio.get_running_loop()
        q: asyncio.Queue[Event] = asyncio.Queue()

        def sink(ev: Event) -> None:
            if _wanted(ev, rank):
                loop.call_soon_threadsafe(q.put_nowait, ev)

        self.add_sink(sink)

        async def iterate() -> AsyncIterator[Event]:
            while True:
                ev = await q.get()
                yield ev
                if isinstance(ev, RunFinished):
                    return
        return iterate()

    def add_sink(self, sink: Callable[[Event], None]) -> None:
        """Another consumer of every event (called in the dispatcher thread); before start()."""
        if self._started:
            raise RuntimeError("subscribe before start()")
        self._sinks.append(sink)

    # ---- events -----------------------------------------------------------------------------

    def _post(self, ev: Event) -> None:
        if isinstance(ev, RankOutput):
            if self._events.qsize() > MAX_BACKLOG:
                self._dropped[ev.rank] = self._dropped.get(ev.rank, 0) + len(ev.lines)
                return
            lost = self._dropped.pop(ev.rank, 0)
            if lost:
                ev = RankOutput(ev.rank, (f"[gpu-doctor: {count(lost, 'line')} not shown here; see the log]",)
                                + ev.lines)
        self._events.put(ev)

    def _dispatch(self) -> None:
        while True:
            ev = self._events.get()
            if ev is None:
                break
            for sink in self._sinks:
                try:
                    sink(ev)
                except Exception:  # a broken view must not stop the run
                    pass
            if isinstance(ev, RunFinished):
                break
        self._done.set()

    def _update(self, rank: int, **changes: Any) -> RankStatus:
        with self._lock:
            st = self._status[rank] = replace(self._status[rank], **changes)
            return st

    # ---- supervisor -------------------------------------------------------------------------

    def _supervise(self) -> None:
        try:
            self._prepare()
            # Under srun every task warms its own node up (doctor.launch.srun_task).
            if self.spec.warmup and not self.spec.slurm_hosts and not self._warmup_ok():
                return
            if self._stop_request:
                self._finish()
                return
            self._spawn_all()
            self._stall = hang_monitor.attach(self)
            self._watch()
            self._close_stall_watch()
            self._stop_survivors()
            self._finish()
        except Exception as exc:  # never leave ranks behind on an internal error
            self._close_stall_watch()
            self._kill_all(signal.SIGKILL)
            self._stop_survivors()
            self._post(Note("error", f"internal error: {type(exc).__name__}: {exc}"))
            self._finish(internal_error=f"{type(exc).__name__}: {exc}")

    def sample_now(self) -> bool:
        """Sample every rank's stack now (the app's key); False when the launch has no stall watch."""
        if self._stall is None:
            return False
        self._stall.sample_now()
        return True

    def _close_stall_watch(self) -> None:
        if self._stall is not None:
            self._stall.close()

    def _stop_survivors(self) -> None:
        try:
            self._sweep()
        finally:
            reaper.become_subreaper(False)

    def _sweep(self) -> None:
        """Kill what the ranks left running: their cgroups' members, the orphans gpu-doctor adopted
        from them (by process tree), anything still carrying the launch's marker; name each one."""
        from doctor.isolate import LIVE_GROUPS

        table = reaper.processes()
        me = os.getpid()
        # Ranks still alive are our unreaped children (their pids cannot have been reused).
        alive = {p.popen.pid for p in self._procs if p.popen is not None
                 and (info := table.get(p.popen.pid)) is not None and info.ppid == me}
        keep = set(LIVE_GROUPS)  # gpu-doctor's own probes, running beside the launch
        groups = {p.popen.pid for p in self._procs if p.popen is not None}  # each rank leads its own
        killed = [reaper.describe(pid, table) for pid in self._cgroups.sweep(keep)
                  if reaper.left_running(pid, table, groups)]
        if self._first_tick is not None:
            killed += reaper.sweep_tree(alive, self._first_tick, keep, groups)
        table = reaper.processes()
        killed += [reaper.describe(pid, table) for pid in reaper.stop_survivors(self.marker)]
        killed = list(dict.fromkeys(killed))
        self.leftovers += [k for k in killed if k not in self.leftovers]
        if killed:
            self._post(Note("warn", f"stopped {count(len(killed), 'process', 'processes')} the ranks left running "
                                    f"({', '.join(killed[:10])}): nothing outlives the launch"))

    def _prepare(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        spec = self.spec
        if spec.slurm_hosts:
            # The first node's address, as Slurm reaches it: never localhost across nodes.
            addr = slurm.node_address(spec.slurm_hosts[0], spec.base_env())
            self.master_port = self.master_port or slurm.master_port_for(spec.base_env().get("SLURM_JOB_ID", ""))
            spec = replace(spec, master_addr=addr)
            argv = tuple(slurm.srun_command(spec, addr, self.master_port, run_dir=self.run_dir))
            self._procs = [_Proc(argv, tuple(range(spec.world_size)), demux=True)]
            self._nodes = placement.rank_nodes(spec.slurm_hosts[:max(1, spec.nnodes)], spec.nproc)
            for r in range(spec.world_size):
                self._update(r, log_path=str(self.run_dir / f"rank_{r}.log"), node=self._nodes.get(r, ""))
        else:
            self.master_port = self.master_port or free_port(spec.master_addr)
            self.plans = plan_ranks(spec, self.master_port, self.run_dir)
            self._procs = [_Proc(p.argv, (p.rank,)) for p in self.plans]
            for p in self.plans:
                self._update(p.rank, log_path=p.log_path)
        self.master = f"{spec.master_addr}:{self.master_port}"
        self._write_plan()
        self._post(RunStarted(str(self.run_dir), spec.world_size, self.master,
                              tuple(p.argv for p in self._procs)))
        if spec.slurm_hosts:
            self._post(Note("info", ifname.plan_line(spec.socket_ifname, spec.base_env(), spec.master_addr)))

    def _write_plan(self) -> None:
        doc = {"spec": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self.spec).items()
                        if k != "env"},
               "master": self.master,
               "host": socket.gethostname(),
               "processes": [{"ranks": list(p.ranks), "argv": list(p.argv)} for p in self._procs],
               "nodes": {str(r): n for r, n in sorted(self._nodes.items())},
               "ranks": [{"rank": p.rank, "argv": list(p.argv), "env": dict(p.rank_env),
                          "cwd": p.cwd, "log": p.log_path} for p in self.plans] or self._task_ranks()}
        (self.run_dir / "launch.json").write_text(json.dumps(doc, indent=2, default=str))

    def _task_ranks(self) -> list[dict[str, Any]]:
        """Under srun: what each task sets for its rank (doctor.launch.srun_task), for the record."""
        spec = self.spec
        if not spec.slurm_hosts:
            return []
        argv = list(rank_command(spec))
        return [{"rank": r, "argv": argv,
                 "env": {"RANK": str(r), **({"SCOREP_EXPERIMENT_DIRECTORY": experiment_path(spec, r)}
                                            if spec.instrumented else {})},
                 "cwd": str(spec.workdir), "log": self._status[r].log_path, "node": self._nodes.get(r, "")}
                for r in range(spec.world_size)]

    def _warmup_ok(self) -> bool:
        spec = self.spec

        def on_attempt(n: int, res: dict[str, object]) -> None:
            self._post(WarmupAttempt(n, bool(res.get("ok")), str(res.get("kind")), str(res.get("error") or "")))

        self._post(Note("info", f"CUDA warm-up: torch.zeros(1).cuda() in {spec.python}, outside Score-P"))
        res = run_warmup(spec.python, spec.base_env(), str(spec.workdir), spec.warmup_budget_s,
                         should_stop=lambda: self._stop_request is not None, on_attempt=on_attempt)
        self.warmup_result = res
        if res.ok:
            self._post(Note("info", f"CUDA warm-up: {res.describe()}"))
            return True
        if res.kind == "stopped":
            self._finish()
            return False
        if res.no_cuda and not spec.cuda_required:
            self._post(Note("warn", f"CUDA warm-up: {res.describe()}; continuing without a GPU "
                                    "(the ranks must not need CUDA)"))
            return True
        why = res.describe()
        if res.no_cuda:
            why += ("; --instrument scorep with --cuda needs CUDA: run on a GPU node, or drop --cuda "
                    "from --scorep-flags for a CPU-only measurement")
        self._post(Note("error", f"CUDA warm-up failed: {why}"))
        self._finish(warmup_failed=why)
        return False

    def _spawn_all(self) -> None:
        base = self.spec.base_env()
        for proc in self._procs:
            if self._stop_request:
                proc.exited = True   # never started: nothing to stop
                continue
            self._spawn(proc, base)

    def _spawn(self, proc: _Proc, base: dict[str, str]) -> None:
        plan = self.plans[proc.ranks[0]] if not proc.demux else None
        for r in proc.ranks:
            self._logs[r] = open(self._status[r].log_path, "ab", buffering=0)  # noqa: SIM115
        try:
            env = reaper.marked(dict(plan.env(base) if plan else base), self.marker)
            join = self._cgroups.join_file(proc.ranks[0])
            proc.popen = subprocess.Popen(
                list(proc.argv), env=env, cwd=str(self.spec.workdir),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True, bufsize=0, preexec_fn=reaper.rank_preexec(join))
        except OSError as exc:
            text = f"gpu-doctor: cannot start {proc.argv[0]}: {exc.strerror or exc}"
            for r in proc.ranks:
                self._logs[r].write(text.encode() + b"\n")
                self._tails[r].append(text)
            self._proc_exited(proc, 127)
            return
        pid = proc.popen.pid
        if self._first_tick is None:
            me = reaper.processes().get(pid)
            self._first_tick = me.started if me is not None else 0
        for r in proc.ranks:
            self._update(r, state=RankState.STARTING, pid=pid)
            self._post(RankStarted(r, pid, proc.argv, self._status[r].log_path))
            self._post(RankStateChanged(r, RankState.STARTING, f"pid {pid}"))
        threading.Thread(target=self._read, args=(proc,), name=f"launch-read-{proc.ranks[0]}",
                         daemon=True).start()
        threading.Thread(target=self._wait_proc, args=(proc,), name=f"launch-wait-{proc.ranks[0]}",
                         daemon=True).start()

    def _watch(self) -> None:
        spec = self.spec
        grace_until: float | None = None
        kill_at: float | None = None
        watch_rdv = spec.rendezvous_timeout_s is not None and (bool(spec.slurm_hosts) or rendezvous.available())
        joined: set[int] = set()
        first_join: float | None = None
        next_poll = 0.0
        while not all(p.exited for p in self._procs):
            try:
                proc: _Proc | None = self._inbox.get(timeout=0.1)
            except queue.Empty:
                proc = None
            now = time.monotonic()
            if proc is not None and self._first_failed is not None and grace_until is None \
                    and self._stopping is None:
                grace_until = now + spec.grace_s
                if not all(p.exited for p in self._procs):
                    self._post(Note("warn", f"rank {self._first_failed} failed; stopping the other ranks "
                                            f"in {spec.grace_s:g} s unless they finish"))
            if self._stop_request and self._stopping is None:
                kill_at = self._begin_stop(*self._stop_request)
            if grace_until is not None and now >= grace_until and self._stopping is None:
                kill_at = self._begin_stop(f"rank {self._first_failed} failed", 1)
            if kill_at is not None and (now >= kill_at or self._force_kill):
                self._kill_all(signal.SIGKILL)
                kill_at = None
            if watch_rdv and now >= next_poll and self._stopping is None:
                next_poll = now + RENDEZVOUS_POLL_S
                joined, first_join, watch_rdv = self._poll_rendezvous(joined, first_join, now)

    def _poll_rendezvous(self, joined: set[int], first_join: float | None,
                         now: float) -> tuple[set[int], float | None, bool]:
        live = {r: s.pid for r, s in self._status.items()
                if s.pid is not None and not s.state.final and r not in joined}
        # Under srun each task watches its own rank (on its node) and says when it joined.
        new = (set(live) & self._marks_joined if self.spec.slurm_hosts
               else rendezvous.joined(live, self.master_port))
        for r in sorted(new):
            joined.add(r)
            self._promote(r, "joined the rendezvous")
        if joined and first_join is None:
            first_join = now
        passed = {r for r, s in self._status.items() if s.state == RankState.DONE}
        missing = sorted(set(self._status) - joined - passed)
        if not missing:
            self._post(Note("info", f"all {count(len(self._status), 'rank')} joined the rendezvous at {self.master}"))
            return joined, first_join, False
        timeout = self.spec.rendezvous_timeout_s or 0.0
        if first_join is not None and now - first_join > timeout:
            detail = "; ".join(f"rank {r}{self._on(r)} ({self._status[r].state.value}, last line: "
                               f"{self._status[r].last_line[-120:] or '(none)'!r})" for r in missing)
            reason = (f"rendezvous timed out: {len(joined)} of {count(len(self._status), 'rank')} joined "
                      f"{self.master} within {timeout:g} s of the first; not joined: {detail}. "
                      "A rank that never calls init_process_group, a wrong MASTER_ADDR/MASTER_PORT "
                      "or a blocked port keeps the others waiting")
            blocked = [self._reach[r] for r in missing if r in self._reach and self._reach[r].what == "unreachable"]
            if blocked:
                reason = "; ".join(f"rank {m.rank} on {m.node} cannot reach {self.master}"
                                   + (f" ({m.detail})" if m.detail else "") for m in blocked) + "; " + reason
            self._stop_request = self._stop_request or (reason, EXIT_RENDEZVOUS_TIMEOUT)
            return joined, first_join, False
        return joined, first_join, True

    def _begin_stop(self, reason: str, exit_code: int) -> float:
        self._stopping = (reason, exit_code)
        self._post(Note("warn", f"stopping every rank: {reason}"))
        self._kill_all(signal.SIGTERM)
        return time.monotonic() + self.spec.kill_after_s

    def _kill_all(self, sig: int) -> None:
        for proc in self._procs:
            if proc.popen is None or proc.exited:
                continue
            proc.term_sent = True
            try:
                # The leader is not reaped before its waiter has seen it exit, so its
                # pid (= the group id) cannot have been reused by a stranger.
                os.killpg(proc.popen.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    # ---- per-process threads ----------------------------------------------------------------

    def _read(self, proc: _Proc) -> None:
        assert proc.popen is not None and proc.popen.stdout is not None
        fd = proc.popen.stdout.fileno()
        splitter = LineSplitter()
        try:
            while not proc.abandon:
                ready, _, _ = select.select([fd], [], [], 0.25)
                if not ready:
                    continue
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    break
                if proc.demux:
                    lines, _ = splitter.feed(chunk)
                    self._demux(lines)
                else:
                    self._logs[proc.ranks[0]].write(chunk)
                    lines, current = splitter.feed(chunk)
                    self._output(proc.ranks[0], lines, current, len(chunk))
            rest = splitter.flush()
            if proc.demux:
                self._demux(rest)
            elif rest:
                self._output(proc.ranks[0], rest, None, 0)
        except OSError:
            pass
        finally:
            proc.popen.stdout.close()
            proc.reader_done.set()

    def _demux(self, lines: list[str]) -> None:
        by_rank: dict[int, list[str]] = {}
        for line in lines:
            rank, text = slurm.split_label(line)
            if rank is None or rank not in self._status:
                report = slurm.task_report(line)
                if report:
                    self._tasks_ended(*report)
                failed = slurm.node_failure(line)
                if failed and failed not in self._failed_nodes:
                    self._node_failed(failed)
                self._post(Note("info", line if line.startswith("srun") else f"srun: {line}"))
                continue
            if text.startswith(placement.MARK):
                self._rendezvous_mark(rank, text)
            by_rank.setdefault(rank, []).append(text)
        for rank, texts in by_rank.items():
            data = ("\n".join(texts) + "\n").encode("utf-8", "replace")
            self._logs[rank].write(data)
            self._output(rank, texts, None, len(data))

    def _on(self, rank: int) -> str:
        node = self._nodes.get(rank)
        return f" on {node}" if node else ""

    def _rendezvous_mark(self, rank: int, text: str) -> None:
        mark = placement.parse_mark(text)
        if mark is None or mark.rank != rank:
            return
        if mark.what == "joined":
            self._marks_joined.add(rank)
        else:
            self._reach[rank] = mark

    def _node_lost_text(self, node: str) -> str:
        ranks = sorted(r for r, n in self._nodes.items() if n == node)
        there = f" ({placement.ranks_text(ranks)} ran there)" if ranks else ""
        return f"node {node} failed{there}: srun: \"Node failure on {node}\" (slurmctld lost its slurmd)"

    def _node_failed(self, node: str) -> None:
        """srun says slurmctld declared `node` failed: Slurm cancels the job; say which node, now."""
        self._failed_nodes.append(node)
        self._post(Note("error", f"{self._node_lost_text(node)}; Slurm cancels the job "
                                 f"(`scontrol show node {node}` says why)"))

    def _tasks_ended(self, node: str, tasks: tuple[int, ...], code: int) -> None:
        """srun said these tasks ended (only failures are reported): end their ranks now,
        so that the grace period starts while the others still run."""
        for rank in tasks:
            if rank not in self._status or rank in self._task_codes:
                continue
            self._task_codes[rank] = code
            self._nodes[rank] = node
            state = RankState.KILLED if self._stopping else RankState.FAILED
            if state == RankState.FAILED and self._first_failed is None:
                self._first_failed = rank
            self._ended_at[rank] = time.monotonic()
            self._update(rank, state=state, returncode=code, node=node)
            self._post(RankStateChanged(rank, state, f"exit code {code} on {node}"))
            self._post(RankExited(rank, code, state))
        step = next((p for p in self._procs if p.demux), None)
        if step is not None:
            self._inbox.put(step)   # wakes the watcher: the grace period starts

    def _promote(self, rank: int, detail: str) -> None:
        """STARTING -> RUNNING, once."""
        with self._lock:
            st = self._status[rank]
            if st.state != RankState.STARTING:
                return
            self._status[rank] = replace(st, state=RankState.RUNNING)
        self._post(RankStateChanged(rank, RankState.RUNNING, detail))

    def _output(self, rank: int, lines: list[str], current: str | None, nbytes: int) -> None:
        self._tails[rank].extend(lines)
        found: Progress | None = None
        for line in [*lines[-20:], *([current] if current else [])]:
            found = merge_progress(found, parse_progress(line))
        with self._lock:
            st = self._status[rank]
            last = current if current is not None else (lines[-1] if lines else st.last_line)
            new = replace(st, last_line=last, lines=st.lines + len(lines), bytes=st.bytes + nbytes)
            if found is not None:
                new = replace(new, step=found.step if found.step is not None else st.step,
                              total=found.total if found.step is not None else st.total,
                              epoch=found.epoch if found.epoch is not None else st.epoch,
                              loss=found.loss if found.loss is not None else st.loss)
            self._status[rank] = new
        self._promote(rank, "output")
        if self.spec.canary:
            self._canary_alarms(lines)
        if lines:
            self._post(RankOutput(rank, tuple(lines)))
        if found is not None and (new.step, new.total, new.epoch, new.loss) != (st.step, st.total, st.epoch, st.loss):
            self._post(RankProgress(rank, new.step, new.total, new.epoch, new.loss))

    def _canary_alarms(self, lines: list[str]) -> None:
        for text in self.canary.new(lines):
            differs = is_mismatch(text)
            self._post(Note("error" if differs else "warn", f"canary: {text}"))
            if differs and self.spec.canary_action == "stop":
                self.stop(f"replicas differ ({text}); --canary-action stop", EXIT_CANARY)

    def _wait_proc(self, proc: _Proc) -> None:
        assert proc.popen is not None
        pid = proc.popen.pid
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
        except ChildProcessError:
            pass
        try:
            os.killpg(pid, signal.SIGKILL)   # what the rank left in its group: orphans-to-be
        except (ProcessLookupError, PermissionError):
            pass
        code = proc.popen.wait()
        if not proc.reader_done.wait(3.0):   # a grandchild that left the group holds the pipe
            proc.abandon = True
            proc.reader_done.wait(1.0)
        self._proc_exited(proc, code)

    def _rank_outcome(self, proc: _Proc, rank: int, code: int) -> tuple[RankState, int]:
        if not proc.demux:
            return (RankState.KILLED if proc.term_sent else
                    RankState.DONE if code == 0 else RankState.FAILED), code
        # One srun for all ranks: its own report says which task failed, and how.
        if rank in self._task_codes:
            return RankState.FAILED, self._task_codes[rank]
        if code == 0:
            return RankState.DONE, 0
        if proc.term_sent or self._task_codes:   # stopped by us, or by srun --kill-on-bad-exit
            return RankState.KILLED, code
        return RankState.FAILED, code            # srun itself failed

    def _proc_exited(self, proc: _Proc, code: int) -> None:
        now = time.monotonic()
        for r in proc.ranks:
            if proc.demux and r in self._task_codes and self._status[r].state.final:
                log = self._logs.pop(r, None)
                if log is not None:
                    log.close()
                continue   # ended when srun reported it
            state, rank_code = self._rank_outcome(proc, r, code)
            if state == RankState.FAILED and self._first_failed is None:
                self._first_failed = r
            self._ended_at[r] = now
            log = self._logs.pop(r, None)
            if log is not None:
                log.close()
            self._update(r, state=state, returncode=rank_code)
            self._post(RankStateChanged(r, state, f"exit code {rank_code}"))
            self._post(RankExited(r, rank_code, state))
        proc.exited = True
        self._inbox.put(proc)

    # ---- the end ----------------------------------------------------------------------------

    def _finish(self, warmup_failed: str | None = None, internal_error: str | None = None) -> None:
        results = tuple(RankResult(r, s.state, s.returncode, s.pid, s.log_path, tuple(self._tails[r]), s.node)
                        for r, s in sorted(self._status.items()))
        n = len(results)
        stopped = self._stopping or self._stop_request
        killed = [r.rank for r in results if r.state == RankState.KILLED]
        if internal_error:
            code, reason = 2, f"internal error: {internal_error}"
        elif warmup_failed:
            code, reason = EXIT_WARMUP_FAILED, f"not launched: CUDA warm-up failed: {warmup_failed}"
        elif self._first_failed is not None:
            first = results[self._first_failed]
            code = shell_code(first.returncode)
            reason = f"rank {first.rank}{self._on(first.rank)} failed first ({first.ended_text})"
            for node, ranks in placement.lost_nodes(results, self._nodes).items():
                reason += f"; lost {node}: {placement.ranks_text(ranks)}"
            if killed:
                which = f"rank{'s' if len(killed) > 1 else ''} {', '.join(map(str, killed))}"
                if not stopped:
                    reason += f"; {which} {'were' if len(killed) > 1 else 'was'} stopped"
                elif stopped[0].startswith("rank "):
                    reason += f"; stopped {which} after the {self.spec.grace_s:g} s grace"
                else:
                    reason += f"; stopped {which} ({stopped[0]})"
        elif stopped:
            code, reason = stopped[1], f"{stopped[0]}; stopped {len(killed)} of {count(n, 'rank')}"
        elif results and all(r.state == RankState.DONE for r in results):
            code, reason = 0, f"all {count(n, 'rank')} finished with exit code 0"
        else:
            code, reason = 1, "the ranks did not all finish"
        if self._failed_nodes:
            reason = "; ".join(self._node_lost_text(n) for n in self._failed_nodes) + "; " + reason
        if self.leftovers:
            reason += (f"; killed {count(len(self.leftovers), 'process', 'processes')} the ranks left running: "
                       f"{', '.join(self.leftovers[:10])}{' ...' if len(self.leftovers) > 10 else ''}")
        canary: tuple[str, ...] = ()
        if self.spec.canary and not warmup_failed:
            code, reason, canary = canary_outcome(self.run_dir, self.spec.canary, self.spec.canary_action,
                                                  self.spec.world_size, self.spec.canary_timeout_s, code, reason)
        self.summary = RunSummary(
            exit_code=code, reason=reason, ranks=results, first_failed=self._first_failed,
            run_dir=str(self.run_dir), duration_s=time.monotonic() - self._t0,
            world_size=self.spec.world_size, master=getattr(self, "master", ""),
            stopped_by=stopped[0] if stopped else None,
            warmup=self.warmup_result.describe() if self.warmup_result else None,
            leftovers=tuple(self.leftovers), canary=canary)
        self._write_summary(self.summary)
        self._post(RunFinished(self.summary))

    def _write_summary(self, summary: RunSummary) -> None:
        doc = asdict(summary)
        for r in doc["ranks"]:
            r["state"] = r["state"].value if isinstance(r["state"], RankState) else r["state"]
        try:
            (self.run_dir / "summary.json").write_text(json.dumps(doc, indent=2, default=str))
        except OSError:
            pass
