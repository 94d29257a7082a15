"""How `gpu-doctor launch` shows a run: a rich live table on a terminal, plain lines otherwise.

Rank output goes to stdout (`[rank N] line`, plain mode only); everything
gpu-doctor says goes to stderr. Both views are event sinks for the engine.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from doctor.launch.events import (
    Event,
    Note,
    RankExited,
    RankOutput,
    RankStarted,
    RankState,
    RankStatus,
    RunStarted,
    RunSummary,
    WarmupAttempt,
)
from doctor.launch.gpus import GpuSample
from doctor.sanitize import markup, shown
from doctor.wording import count

if TYPE_CHECKING:
    from rich.console import RenderableType

STATE_STYLE = {RankState.PENDING: "dim", RankState.STARTING: "yellow", RankState.RUNNING: "cyan",
               RankState.DONE: "green", RankState.FAILED: "bold red", RankState.KILLED: "magenta"}


def ended_text(returncode: int | None, state: RankState) -> str:
    if returncode is None:
        return ""
    if returncode < 0:
        from doctor.launch.events import signal_name

        return f"killed by {signal_name(returncode)}"
    return f"exit code {returncode}"


class PlainView:
    """Line output for logs and pipes (no terminal control codes)."""

    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None, quiet: bool = False):
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.quiet = quiet

    def say(self, text: str) -> None:
        print(shown(f"gpu-doctor: {text}"), file=self.err, flush=True)

    def __call__(self, ev: Event) -> None:
        if isinstance(ev, RankOutput):
            if not self.quiet:
                self.out.write("".join(f"[rank {ev.rank}] {line}\n" for line in ev.lines))
                self.out.flush()
        elif isinstance(ev, RunStarted):
            self.say(f"launching {count(ev.world_size, 'rank')}, rendezvous {ev.master}, logs in {ev.run_dir}")
        elif isinstance(ev, Note):
            self.say(ev.text if ev.level == "info" else f"{ev.level}: {ev.text}")
        elif isinstance(ev, WarmupAttempt) and not ev.ok:
            self.say(f"warm-up attempt {ev.attempt}: {ev.kind}: {ev.detail}")
        elif isinstance(ev, RankStarted):
            self.say(f"rank {ev.rank} started (pid {ev.pid}), log {ev.log_path}")
        elif isinstance(ev, RankExited):
            self.say(f"rank {ev.rank} {ev.state.value} ({ended_text(ev.returncode, ev.state)})")


def rank_table(statuses: tuple[RankStatus, ...]) -> Any:
    from rich.table import Table

    table = Table(title="ranks", expand=True, title_justify="left")
    several_nodes = any(s.node for s in statuses)
    if several_nodes:
        table.add_column("node")
    for col, kw in (("rank", {"justify": "right"}), ("state", {}), ("pid", {"justify": "right"}),
                    ("progress", {}), ("exit", {}), ("last line", {"ratio": 1, "no_wrap": True,
                                                                   "overflow": "ellipsis"})):
        table.add_column(col, **kw)  # type: ignore[arg-type]
    for s in statuses:
        table.add_row(*([s.node] if several_nodes else []), str(s.rank), f"[{STATE_STYLE[s.state]}]{s.state.value}[/]",
                      str(s.pid or ""), s.progress_text, ended_text(s.returncode, s.state),
                      markup(s.last_line, one_line=True))
    return table


def gpu_table(samples: tuple[GpuSample, ...], error: str | None) -> Any:
    from rich.table import Table

    table = Table(title="GPUs", expand=True, title_justify="left")
    for col in ("gpu", "name", "util", "memory"):
        table.add_column(col)
    if not samples:
        table.add_row("N/A", error or "no GPUs", "N/A", "N/A")
    for g in samples:
        table.add_row(str(g.index), g.name, g.util_text, g.mem_text)
    return table


def live_renderable(header: str, statuses: tuple[RankStatus, ...], samples: tuple[GpuSample, ...],
                    error: str | None) -> RenderableType:
    from rich.console import Group
    from rich.text import Text

    return Group(Text(shown(header, one_line=True), style="bold"), rank_table(statuses), gpu_table(samples, error))


class LiveView:
    """A rich Live display refreshed from the engine's snapshots; notes print above it."""

    def __init__(self, get_statuses: Callable[[], tuple[RankStatus, ...]],
                 get_gpus: Callable[[], tuple[tuple[GpuSample, ...], str | None]], header: str):
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True)
        self.header = header
        self._get_statuses = get_statuses
        self._get_gpus = get_gpus
        self.live = Live(get_renderable=self._render, console=self.console, refresh_per_second=4,
                         transient=False, redirect_stdout=False, redirect_stderr=False)

    def _render(self) -> RenderableType:
        samples, error = self._get_gpus()
        return live_renderable(self.header, self._get_statuses(), samples, error)

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def __call__(self, ev: Event) -> None:
        if isinstance(ev, Note):
            style = {"warn": "yellow", "error": "bold red"}.get(ev.level, "")
            self.console.print(f"[{style}]{markup(ev.text)}[/]" if style else shown(ev.text),
                               markup=bool(style), highlight=False)
        elif isinstance(ev, RunStarted):
            self.header = f"{count(ev.world_size, 'rank')} · rendezvous {ev.master} · logs {ev.run_dir}"
        elif isinstance(ev, WarmupAttempt) and not ev.ok:
            self.console.print(shown(f"warm-up attempt {ev.attempt}: {ev.kind}: {ev.detail}"), markup=False,
                               highlight=False)


def summary_lines(summary: RunSummary, tail: int = 10) -> list[str]:
    """The end-of-run summary for people: the reason, each rank, the first failure's last lines."""
    lines = [summary.reason + f" ({summary.duration_s:.1f} s, exit code {summary.exit_code})"]
    for r in summary.ranks:
        node = f"{r.node:<10} " if r.node else ""
        lines.append(f"  rank {r.rank:<3} {node}{r.state.value:<8} {r.ended_text:<20} log {r.log_path}")
    if summary.first_failed is not None:
        first = summary.rank(summary.first_failed)
        lines.append(f"  last lines of rank {first.rank} ({first.log_path}):")
        lines.extend(f"    | {shown(line, one_line=True)}" for line in first.last_lines[-tail:])
    failed = [r.rank for r in summary.ranks if r.state == "failed"]  # died, not stopped by us
    if failed:
        from doctor.launch.failures import rank_failures

        for f in rank_failures(summary.run_dir, failed):
            lines.append(f"  {f.text()}: gpu-doctor explain {f.check_id}")
    lines.extend(f"  {line}" for line in summary.canary)
    return lines
