"""Read experiment folders side by side: one worker process per folder, `jobs` at a time.

The ranks of a run are independent files, so they can be read in parallel. Each folder is read
in a process of its own (forked from a forkserver that has the readers imported already), with
its address space capped at `WORKER_MEMORY`: a corrupt trace that makes the OTF2 library
abort, crash or allocate without end costs that folder only, as a note, while the others
finish. The results come back in folder order, so the report equals the serial one (`jobs=1`
reads in this process, one folder after the other).

What the OTF2 C library prints on stderr about a damaged archive is collected per folder and
becomes one note of that folder.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import resource
import signal
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from doctor.timeline.experiment import ExperimentRead, ReadOptions, Task, read_experiment
from doctor.timeline.progress import Progress
from doctor.wording import count

WORKER_MEMORY = 4 << 30      # address space per worker process (bytes)


def default_jobs() -> int:
    """The cores this process may run on (a Slurm job's allocation, taskset, cgroups)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def read_all(tasks: Sequence[Task], options: ReadOptions, jobs: int,
             on_progress: Callable[[Progress], None] | None = None) -> list[ExperimentRead]:
    """Every task's read, in the order given; never raises for a bad folder."""
    if jobs <= 1 or len(tasks) <= 1:
        return [_read_here(i, task, options, len(tasks), on_progress) for i, task in enumerate(tasks)]
    return _Pool(list(tasks), options, jobs, on_progress).run()


def _read_here(index: int, task: Task, options: ReadOptions, total: int,
               on_progress: Callable[[Progress], None] | None) -> ExperimentRead:
    def on_events(events: int) -> None:
        if on_progress:
            on_progress(Progress(total, index, task.experiment, events))

    start, cpu = time.perf_counter(), time.process_time()
    read = read_with_notes(task, options, on_events)
    if on_progress:
        on_progress(_finished(read, total, index + 1, time.perf_counter() - start, None,
                              time.process_time() - cpu))
    return read


def read_with_notes(task: Task, options: ReadOptions,
                    on_events: Callable[[int], None] | None) -> ExperimentRead:
    """`read_experiment`, with what the C library wrote to stderr meanwhile as one note."""
    with c_stderr_captured() as said:
        read = read_experiment(task.experiment, options, on_events, task.part)
    if not said:
        return read
    note = f"{task.experiment}: the OTF2 library reported {count(len(said), 'error line')}, e.g. {said[-1]}"
    return ExperimentRead(read.path, read.ranks, read.profile, (*read.notes, note), read.events, read.failed)


@contextlib.contextmanager
def c_stderr_captured() -> Iterator[list[str]]:
    """Collect what C libraries write to file descriptor 2 meanwhile (not thread-safe: the CLI,
    the report's child and the workers are single-threaded while they read)."""
    import sys

    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read(1 << 20).decode("utf-8", "replace")
            lines.extend(ln for ln in text.splitlines() if ln.strip())


def _finished(read: ExperimentRead, total: int, done: int, seconds: float, peak: float | None,
              cpu: float) -> Progress:
    reader = read.ranks[0].reader if read.ranks else ""
    return Progress(total, done, read.path, read.events, True, reader, peak, seconds, cpu)


def peak_rss_mib() -> float | None:
    """This process's peak resident memory (VmHWM)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _worker(task: Task, options: ReadOptions, cwd: str, conn: Connection) -> None:
    """In the worker process: read one folder, send progress, then ("done", read, peak MiB, CPU s)."""
    os.chdir(cwd)                 # paths stay as the user gave them, as in the serial run
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or hard > WORKER_MEMORY:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, hard))
    try:
        read = read_with_notes(task, options, lambda events: conn.send(("events", events)))
    except MemoryError:
        read = ExperimentRead(task.experiment, notes=(
            f"{task.experiment}: reading it needed more than {WORKER_MEMORY >> 30} GiB; left out",), failed=True)
    conn.send(("done", read, peak_rss_mib(), time.process_time()))
    conn.close()


class _Pool:
    """At most `jobs` worker processes; a dead worker becomes a note about its folder."""

    def __init__(self, tasks: list[Task], options: ReadOptions, jobs: int,
                 on_progress: Callable[[Progress], None] | None):
        self.tasks = tasks
        self.options = options
        self.jobs = jobs
        self.on_progress = on_progress
        self.results: list[ExperimentRead | None] = [None] * len(tasks)
        self.running: dict[Connection, tuple[int, Any, float]] = {}
        self.done = 0
        self.context = _context()

    def run(self) -> list[ExperimentRead]:
        waiting = deque(range(len(self.tasks)))
        try:
            while waiting or self.running:
                while waiting and len(self.running) < self.jobs:
                    self._start(waiting.popleft())
                for conn in wait(list(self.running)):
                    self._receive(conn)  # type: ignore[arg-type]
        finally:
            for _, process, _ in self.running.values():
                process.kill()
                process.join()
        return [r for r in self.results if r is not None]

    def _start(self, index: int) -> None:
        receive, send = self.context.Pipe(duplex=False)
        process = self.context.Process(target=_worker, args=(self.tasks[index], self.options, os.getcwd(),
                                                             send), daemon=True)
        process.start()
        send.close()
        self.running[receive] = (index, process, time.perf_counter())

    def _receive(self, conn: Connection) -> None:
        index, process, started = self.running[conn]
        experiment = self.tasks[index].experiment
        try:
            message = conn.recv()
        except (EOFError, OSError):
            message = None
        if message is not None and message[0] == "events":
            if self.on_progress:
                self.on_progress(Progress(len(self.tasks), self.done, experiment, message[1]))
            return
        del self.running[conn]
        conn.close()
        process.join()
        if message is None:
            read = ExperimentRead(experiment, notes=(f"{experiment}: the reader process died "
                                                     f"({_exit_reason(process.exitcode)}); left out",),
                                  failed=True)
            peak, cpu = None, 0.0
        else:
            read, peak, cpu = message[1], message[2], message[3]
        self.results[index] = read
        self.done += 1
        if self.on_progress:
            self.on_progress(_finished(read, len(self.tasks), self.done, time.perf_counter() - started, peak, cpu))


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _context() -> Any:
    """A plain fork where this process runs one thread (the CLI: the readers are imported already,
    so a worker costs milliseconds, not an interpreter's start); else forkserver: each worker forks
    from a server with the readers imported (safe beside threads, the app's); spawn where there is none."""
    import threading

    if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    try:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["doctor.timeline.parallel", "doctor.timeline.trace", "otf2"])
        return context
    except ValueError:
        return multiprocessing.get_context("spawn")
