"""Progress while the traces are read: a rich bar on a terminal, plain lines otherwise.

`analyse(..., on_progress=...)` calls back with a `Progress` for every batch of records a reader
has streamed (about a million) and once per experiment folder when it is done. `StderrProgress`
shows them on stderr (never stdout: that is the tables or the JSON); the TUI shows them in the
launch screen's verdict area.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any


@dataclass(frozen=True)
class Progress:
    """Where the reading stands: `done` of `total` experiment folders finished."""

    total: int
    done: int
    experiment: Path | None = None    # the folder this update is about
    events: int = 0                   # records read in it so far (all of them when finished)
    finished: bool = False
    reader: str = ""                  # "c" / "python" once finished with a trace
    peak_rss_mib: float | None = None  # the worker process's peak memory, when read in one
    seconds: float = 0.0               # how long that folder took
    cpu_seconds: float = 0.0           # the CPU time it took (its worker's, or this process's)

    def line(self) -> str:
        """One plain line: `[3/8] scorep_rank_2: 4,000,000 events, C reader, 0.4 s`."""
        name = self.experiment.name if self.experiment else "?"
        if not self.finished:
            return f"[{self.done}/{self.total}] {name}: {self.events:,} records read ..."
        how = {"c": ", C reader", "python": ", Python reader"}.get(self.reader, "")
        memory = f", peak {self.peak_rss_mib:.0f} MiB" if self.peak_rss_mib else ""
        return f"[{self.done}/{self.total}] {name}: {self.events:,} events{how}, {self.seconds:.1f} s{memory}"


@dataclass
class StderrProgress:
    """The CLI's display: `with StderrProgress(stream) as show: analyse(..., on_progress=show)`."""

    stream: IO[str]
    prefix: str = "gpu-doctor timeline: "
    _bar: Any = None
    _task: Any = None
    _reading: dict[Path, int] = field(default_factory=dict)
    _last_line: float = 0.0

    def __enter__(self) -> StderrProgress:
        self._last_line = time.monotonic()
        if self.stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("reading traces"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[what]}"), TimeElapsedColumn(),
                                 console=Console(file=self.stream), transient=True)
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def __call__(self, update: Progress) -> None:
        if update.experiment is not None:
            if update.finished:
                self._reading.pop(update.experiment, None)
            else:
                self._reading[update.experiment] = update.events
        if self._bar is not None:
            self._show_bar(update)
        elif update.finished:
            self._print(update.line())
        elif time.monotonic() - self._last_line > 10:
            # A long folder: a line every 10 s at most, so a log shows it is still moving.
            self._print(update.line())

    def _show_bar(self, update: Progress) -> None:
        what = ", ".join(f"{path.name} {events / 1e6:.1f} M" for path, events in list(self._reading.items())[:4])
        if self._task is None:
            self._task = self._bar.add_task("read", total=update.total, what=what)
        self._bar.update(self._task, completed=update.done, what=what)

    def _print(self, text: str) -> None:
        self._last_line = time.monotonic()
        print(f"{self.prefix}{text}", file=self.stream, flush=True)
