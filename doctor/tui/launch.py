"""Launch screen: start the per-rank run and watch it live.

One async worker per rank consumes that rank's events from the launcher
engine; lines go to a bounded per-rank buffer, and a timer moves the selected
rank's new lines into the log pane in batches. The full logs are on disk.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import (
    Button,
    DataTable,
    Footer,
    Header,
    Input,
    Label,
    Log,
    Select,
    Sparkline,
    Static,
)

from doctor import sanitize
from doctor.case import Case
from doctor.launch.spec import DEFAULT_SCOREP_FLAGS, job_folder
from doctor.tui.tickbox import Tickbox
from doctor.wording import count

if TYPE_CHECKING:
    from doctor.launch.engine import Launcher
    from doctor.launch.events import RankStatus, RunSummary
    from doctor.tui.options import Options

W = TypeVar("W", bound=Widget)
LOG_MAX_LINES = 2000
LINES_PER_TICK = 60
BUFFER_LINES = 5000
REFRESH_S = 0.1
LAST_LINE_WIDTH = 80  # characters of a rank's last line in the table (the log pane has all of it)
GPU_HISTORY = 60
STATE_STYLE = {"pending": "dim", "starting": "cyan", "running": "bold cyan", "done": "green",
               "failed": "bold red", "killed": "magenta"}


UNRESOLVED = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")


def unresolved(words: list[str]) -> list[str]:
    """The shell variables left in a command read from a job script (`$CKPT`): each once, in order."""
    return list(dict.fromkeys(m.group(0) for w in words for m in UNRESOLVED.finditer(w)))


def fold(lines: list[str], width: int) -> list[str]:
    """Lines longer than the log pane, folded onto continuation lines: the pane does not wrap, and
    the end of a long line (an exception's message) would be out of sight."""
    if width < 20:
        return lines
    out: list[str] = []
    for line in lines:
        out.append(line[:width])
        out += ["  " + line[i:i + width - 2] for i in range(width, len(line), width - 2)]
    return out


def labelled(widget: W, label: str) -> W:
    """A form field with its name in its top border (the form stays one row high)."""
    widget.border_title = label
    return widget


def suggested_command(case: Case, facts: dict[str, Any] | None) -> tuple[str, int]:
    """The training command and rank count the job folder runs, as far as it can be read."""
    job = (facts or {}).get("job")
    nproc = 2
    for _cmd, launch in getattr(job, "launches", []) or []:
        if launch.training_script:
            script = launch.training_script
            if case.root:
                try:
                    script = str(Path(script).resolve().relative_to(case.root))
                except ValueError:
                    pass
            spawner = launch.spawner
            if spawner is not None and spawner.nproc:
                nproc = int(spawner.nproc)
            return shlex.join([script, *launch.training_args]), nproc
    return "train.py", nproc


def timeline_text(workdir: Path, width: int = 130, timeout: float = 120.0,
                  on_progress: Callable[[str], None] | None = None) -> str:
    """Where the time went in the run's traces (overlap-aware), as plain text; never raises.

    Runs `gpu-doctor timeline` in a subprocess: the OTF2 C library writes to the
    terminal's stderr on bad input (it would garble the screen) and may abort.
    `on_progress` gets its progress lines (`[3/8] scorep_rank_2: 4,000,000 events, ...`).
    """
    import os
    import sys

    from doctor.isolate import run_followed

    prefix = "gpu-doctor timeline: ["

    def progress(line: str) -> None:
        if on_progress is not None and line.startswith(prefix):
            on_progress(line[len(prefix) - 1:])

    env = {**os.environ, "COLUMNS": str(width), "NO_COLOR": "1", "TERM": "dumb"}
    # `-m` puts the working folder first on sys.path: start in `/`, never in a job folder.
    res = run_followed([sys.executable, "-m", "doctor", "timeline", os.path.abspath(workdir)], timeout, progress,
                       env=env, cwd="/")
    if res.timed_out:
        return f"(no time breakdown: the trace analysis took longer than {timeout:.0f} s)"
    if res.returncode != 0:
        lines = res.stderr.strip().splitlines() or [f"exit {res.returncode}"]
        why = next((ln.split(": error: ", 1)[1] for ln in lines if ": error: " in ln
                    and ln.startswith("gpu-doctor")), lines[-1])
        return f"(no time breakdown: {why})"
    return res.stdout.rstrip()


class LaunchScreen(Screen[None]):
    """Form, per-rank table, selected rank's log, GPU sparklines, post-run verdict."""

    BINDINGS = [
        Binding("escape", "close", "Back"),
        Binding("s", "stop", "Stop ranks"),
        Binding("k", "sample_stacks", "Sample stacks"),
    ]

    def __init__(self, case: Case, options: Options, facts: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.case = case
        self.options = options
        self.facts = facts
        self.launcher: Launcher | None = None
        self.summary: RunSummary | None = None
        self.verdict: str = ""
        self.buffers: dict[int, deque[str]] = {}
        self.shown: dict[int, int] = {}
        self.selected_rank = 0
        self.gpu_history: dict[int, tuple[deque[float], deque[float]]] = {}
        self.gpu_monitor: Any = None
        self.stall_text = ""      # the stall watch's last verdict (doctor.hang), with the grouped stacks

    @property
    def running(self) -> bool:
        return self.launcher is not None and self.summary is None

    def compose(self) -> ComposeResult:
        command, nproc = suggested_command(self.case, self.facts)
        yield Header()
        with Horizontal(id="launch-form"):
            yield labelled(Input(command, id="command", placeholder="train.py --args"),
                           "training script and its arguments")
            yield labelled(Input(str(nproc), id="nproc", type="integer", max_length=3), "ranks")
            yield labelled(Input(str(self.options.extra.get("canary") or ""), id="canary", type="integer",
                                 max_length=5, placeholder="off"), "canary K")
            yield labelled(Select([("uninstrumented", "none"), ("Score-P", "scorep")],
                                  value=str(self.options.extra.get("instrument", "none")), id="instrument",
                                  allow_blank=False), "measurement")
            yield labelled(Input(str(self.options.extra.get("scorep_flags", " ".join(DEFAULT_SCOREP_FLAGS))),
                                 id="scorep-flags", placeholder="--cuda --thread=pthread"), "Score-P flags")
            yield Tickbox("CUDA warm-up", value=bool(self.options.extra.get("warmup", True)), id="warmup")
            yield Button("Start", variant="primary", id="start")
        yield DataTable(id="ranks", cursor_type="row")
        yield Log(id="rank-log", max_lines=LOG_MAX_LINES, highlight=False)
        with Vertical(id="gpus"):
            yield Static("GPUs: N/A until the run starts", id="gpu-note")
        with VerticalScroll(id="launch-verdict-box"):
            yield Static("", id="launch-stall")
            yield Static("", id="launch-verdict")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#ranks", DataTable)
        for key, label, width in (("rank", "rank", 4), ("state", "state", 8), ("pid", "pid", 8),
                                  ("step", "step", 22), ("exit", "exit", 7),
                                  ("last", "last line", LAST_LINE_WIDTH)):
            table.add_column(label, key=key, width=width)
        self.set_interval(REFRESH_S, self.refresh_view)
        unset = unresolved(shlex.split(self.query_one("#command", Input).value))
        if unset:
            self.query_one("#launch-verdict", Static).update(Text(
                f"{', '.join(unset)}: the job script sets it only when the job runs. Replace it in the command "
                "with its value before Start.", style="bold yellow"))

    # -- starting ----------------------------------------------------------------
    @on(Button.Pressed, "#start")
    @on(Input.Submitted)
    def start_pressed(self) -> None:
        if self.running:
            self.notify("A run is already going; stop it first (s).", severity="warning")
            return
        try:
            spec = self.build_spec()
        except ValueError as exc:
            self.notify(sanitize.shown(exc), severity="error", markup=False)
            return
        self.start_run(spec)

    def build_spec(self) -> Any:
        from doctor.launch.spec import LaunchSpec

        words = shlex.split(self.query_one("#command", Input).value)
        if not words:
            raise ValueError("Give the training script (and its arguments).")
        unset = unresolved(words)
        if unset:
            raise ValueError(f"{', '.join(unset)} in the command is known only when the job runs: "
                             "replace it with its value (it would be passed literally).")
        nproc_text = self.query_one("#nproc", Input).value or "1"
        nproc = int(nproc_text)
        if not 1 <= nproc <= 256:
            raise ValueError(f"ranks must be 1..256, got {nproc}")
        workdir = self.case.root if self.case.root and self.case.root.is_dir() else Path.cwd()
        canary = int(self.query_one("#canary", Input).value or 0)
        if canary < 0:
            raise ValueError(f"canary every K steps: K must be 1 or more (empty: off), got {canary}")
        return LaunchSpec(script=words[0], args=tuple(words[1:]), nproc=nproc, canary=canary,
                          canary_action=str(self.options.extra.get("canary_action", "fail")),
                          python=self.case.job_python, workdir=workdir,
                          instrument=str(self.query_one("#instrument", Select).value),
                          scorep_flags=tuple(shlex.split(self.query_one("#scorep-flags", Input).value)),
                          warmup=self.query_one("#warmup", Tickbox).value,
                          grace_s=float(self.options.extra.get("grace_s", 5.0)),
                          stall_s=float(self.options.extra.get("stall_s", 300.0)),
                          rendezvous_timeout_s=float(self.options.extra.get("rendezvous_timeout_s", 300.0)))

    def start_run(self, spec: Any) -> None:
        from doctor.launch.engine import Launcher
        from doctor.launch.gpus import GpuMonitor

        table = self.query_one("#ranks", DataTable)
        table.clear()
        self.buffers = {r: deque(maxlen=BUFFER_LINES) for r in range(spec.world_size)}
        self.shown = {r: 0 for r in self.buffers}
        for r in self.buffers:
            table.add_row(str(r), "pending", "", "", "", "", key=str(r))
        self.query_one("#rank-log", Log).clear()
        self.summary = None
        self.verdict = ""
        self.query_one("#launch-verdict", Static).update("starting…")
        self.launcher = Launcher(spec)
        self.stall_text = ""
        self.query_one("#launch-stall", Static).update("")
        for r in self.buffers:  # subscribe before start: no event may be missed
            self.follow_rank(self.launcher.subscribe_async(r), r)
        self.follow_stalls(self.launcher.subscribe_async())
        self.gpu_monitor = GpuMonitor().start()
        self.started_wall = time.time()
        self.launcher.start()
        table.focus()  # arrows pick the rank to follow, `s` stops: neither may type into the form
        self.await_summary(self.launcher, spec)

    @work(group="ranks", exit_on_error=False, description="following one rank's events")
    async def follow_rank(self, events: AsyncIterator[Any], rank: int) -> None:
        from doctor.launch.events import RankOutput

        async for ev in events:
            if isinstance(ev, RankOutput):
                self.buffers[rank].extend(ev.lines)
                self.shown[rank] += len(ev.lines)

    @work(group="stalls", exit_on_error=False, description="following the stall watch")
    async def follow_stalls(self, events: AsyncIterator[Any]) -> None:
        from doctor.launch.events import StallVerdict

        async for ev in events:
            if isinstance(ev, StallVerdict):
                self.show_stall(ev)

    def show_stall(self, ev: Any) -> None:
        """'stalled 5m: rank 1 diverged (DataLoader)', the sentence, the grouped stacks, where it was saved."""
        from doctor.hang.monitor import duration_text

        head = "sampled now" if ev.requested else f"stalled {duration_text(ev.stalled_s)}"
        lines = [f"{head}: {ev.short}", ev.verdict, *ev.groups]
        if ev.path:
            lines.append(f"saved {ev.path} (raw stacks beside it); k samples again")
        self.stall_text = "\n".join(lines)
        self.query_one("#launch-stall", Static).update(
            Text(self.stall_text, style="bold yellow" if ev.diverged_ranks else "yellow"))

    def action_sample_stacks(self) -> None:
        """Sample every rank's stack now (py-spy, twice): the verdict shows above the outcome."""
        if not self.running or self.launcher is None:
            self.notify("No run is going.")
            return
        if self.launcher.sample_now():
            self.notify("Sampling every rank's stack (a few seconds)…")
        else:
            self.notify("This run has no stall watch (--stall 0).", severity="warning")

    @work(thread=True, group="launch", exit_on_error=False, description="waiting for the ranks")
    def await_summary(self, launcher: Launcher, spec: Any) -> None:
        summary = launcher.wait()
        assert summary is not None
        verdict = f"exit {summary.exit_code}: {summary.reason}\nlogs and the run's record: {summary.run_dir}"
        failed = [r.rank for r in summary.ranks if r.state == "failed"]  # died, not stopped by us
        if failed:
            from doctor.launch.failures import rank_failures

            verdict += "".join(f"\n{f.text('press f')}" for f in rank_failures(summary.run_dir, failed))
        verdict += "".join(f"\n{line}" for line in summary.canary)
        if spec.instrumented and any(r.pid for r in summary.ranks):
            from doctor.launch.verify import verify

            check = verify(spec, summary, self.started_wall)
            verdict += "\n" + check.verdict_line() + "".join(f"\n  {p}" for p in check.problems())
            if check.measured:
                def progress(line: str, so_far: str = verdict) -> None:
                    self.app.call_from_thread(lambda: self.query_one("#launch-verdict", Static).update(
                        f"{so_far}\nreading the traces: {line}"))

                verdict += "\n" + timeline_text(job_folder(spec), on_progress=progress)
        self.app.call_from_thread(self.run_finished, summary, verdict)

    def run_finished(self, summary: RunSummary, verdict: str) -> None:
        self.summary = summary
        self.verdict = verdict
        if self.gpu_monitor is not None:
            self.gpu_monitor.stop()
        self.refresh_view()
        style = "bold green" if summary.exit_code == 0 else "bold red"
        self.query_one("#launch-verdict", Static).update(Text(verdict, style=style))
        # The verdict takes room from the log pane: keep its end (the exception's last line) in view.
        log = self.query_one("#rank-log", Log)
        self.call_after_refresh(log.scroll_end, animate=False)

    # -- live view ---------------------------------------------------------------
    def refresh_view(self) -> None:
        if self.launcher is None:
            return
        table = self.query_one("#ranks", DataTable)
        statuses = self.launcher.statuses()
        for st in statuses:
            self.update_row(table, st)
        if self.summary is None and not self.verdict and any(st.pid for st in statuses):
            self.verdict = "running"  # replaced by the outcome when the run ends
            self.query_one("#launch-verdict", Static).update(
                Text(f"running: s (or ctrl+c) stops every rank, k samples their stacks; full logs in "
                     f"{self.launcher.run_dir}"))
        alarms = self.launcher.canary.lines
        if self.summary is None and alarms:
            self.query_one("#launch-verdict", Static).update(Text(
                "\n".join(f"canary: {line}" for line in alarms[-5:]) + "\nrunning: s stops every rank",
                style="bold red"))
        self.flush_log()
        self.update_gpus()

    def update_row(self, table: DataTable[Any], st: RankStatus) -> None:
        key = str(st.rank)
        state = st.state.value
        exit_text = "" if st.returncode is None else (st.signal or str(st.returncode))
        table.update_cell(key, "state", Text(state, style=STATE_STYLE.get(state, "")))
        table.update_cell(key, "pid", str(st.pid or ""))
        table.update_cell(key, "step", Text(st.progress_text))  # rank output is text, never markup
        table.update_cell(key, "exit", exit_text)
        table.update_cell(key, "last", Text(sanitize.shown(st.last_line[-LAST_LINE_WIDTH:], one_line=True)), update_width=False)

    def flush_log(self) -> None:
        """Move the selected rank's new lines into the log pane, at most a screenful per tick.

        A flood (thousands of lines a second) is shown as its latest lines plus a
        marker of how many were skipped: nobody reads faster, and the full log is on disk.
        """
        rank = self.selected_rank
        buf = self.buffers.get(rank)
        if buf is None:
            return
        new = min(self.shown.get(rank, 0), len(buf))
        if not new:
            return
        self.shown[rank] = 0
        take = min(new, LINES_PER_TICK)
        lines = [buf[i] for i in range(len(buf) - take, len(buf))]
        if new > take:
            status = self.launcher.statuses()[rank] if self.launcher else None
            where = f" (full log: {status.log_path})" if status and status.log_path else ""
            lines.insert(0, f"… {count(new - take, 'line')} skipped{where}")
        log = self.query_one("#rank-log", Log)
        log.write_lines(fold([sanitize.shown(line, one_line=True) for line in lines],
                             log.scrollable_content_region.width))

    def update_gpus(self) -> None:
        if self.gpu_monitor is None:
            return
        samples, error = self.gpu_monitor.snapshot()
        note = self.query_one("#gpu-note", Static)
        if error:
            note.update(Text(f"GPUs: N/A ({error})"))
            return
        note.update("GPUs: utilisation % (top) and memory % (bottom), last minute")
        box = self.query_one("#gpus", Vertical)
        for s in samples:
            util, mem = self.gpu_history.setdefault(s.index, (deque(maxlen=GPU_HISTORY),
                                                              deque(maxlen=GPU_HISTORY)))
            util.append(float(s.util_pct or 0))
            mem.append(100.0 * (s.mem_used or 0) / (s.mem_total or 1))
            for kind, data in (("util", util), ("mem", mem)):
                wid = f"gpu-{s.index}-{kind}"
                found = box.query(f"#{wid}")
                if found:
                    found.first(Sparkline).data = list(data)
                else:
                    box.mount(Horizontal(Label(f"GPU{s.index} {kind:<4} "),
                                         Sparkline(list(data), id=wid), classes="gpu-line"))

    @on(DataTable.RowHighlighted, "#ranks")
    def rank_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is None:
            return
        rank = int(event.row_key.value)
        if rank == self.selected_rank:
            return
        self.selected_rank = rank
        log = self.query_one("#rank-log", Log)
        log.clear()
        buf = self.buffers.get(rank, deque())
        log.write_lines(fold([sanitize.shown(line, one_line=True) for line in list(buf)[-LOG_MAX_LINES:]],
                             log.scrollable_content_region.width))
        self.shown[rank] = 0

    # -- stopping ----------------------------------------------------------------
    async def stop_run(self) -> None:
        """Stop every rank's process group and wait until they are gone."""
        launcher = self.launcher
        if launcher is None or self.summary is not None:
            return
        launcher.stop("stopped from the app")
        await asyncio.get_running_loop().run_in_executor(None, launcher.wait)

    async def action_stop(self) -> None:
        if not self.running:
            self.notify("No run is going.")
            return
        self.query_one("#launch-verdict", Static).update("stopping every rank…")
        await self.stop_run()

    async def action_close(self) -> None:
        if self.running:
            self.notify("The run is still going: stop it (s) before leaving.", severity="warning")
            return
        self.dismiss(None)
