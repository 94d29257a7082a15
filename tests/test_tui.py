"""The interactive app, driven with Textual's Pilot over real inputs.

The example job folder is copied to tmp_path; the node probes run against the
C fakes (healthy 4-GPU node); launches run real `gloo` ranks on the CPU.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")

from examples_util import EXAMPLES
from rich.text import Text  # noqa: E402
from textual.widgets import DataTable, Input, Static  # noqa: E402
from tui_pilot import (  # noqa: E402
    CEILING_S,
    click,
    confirm_apply,
    focus_on,
    open_screen,
    plain,
    rerun_done,
    run_app,
    screen_up,
    until,
)

from doctor.case import Case  # noqa: E402
from doctor.model import Status  # noqa: E402
from doctor.tui.app import DoctorApp, Options, make_app  # noqa: E402
from doctor.tui.finding import FindingScreen  # noqa: E402
from doctor.tui.fix import FixScreen  # noqa: E402
from doctor.tui.launch import LaunchScreen  # noqa: E402
from doctor.tui.report import ReportScreen  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = EXAMPLES / "scorep-ddp-broken"

DDP_SCRIPT = """\
import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
steps = int(os.environ.get("STEPS", "5"))
for step in range(1, steps + 1):
    t = torch.ones(4) * rank
    dist.all_reduce(t)
    print(f"step {step}/{steps} sum={t[0].item()}", flush=True)
    if os.environ.get("SLOW"):
        time.sleep(0.2)
dist.barrier()  # torch 2.13 gloo can abort at exit when ranks tear down out of step
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # and its C++ teardown still aborts now and then (status 134): skip it, as launch_util does
"""


async def open_fix(pilot: Any, app: DoctorApp) -> FixScreen:
    """The fix screen, once its plan is there."""
    screen: FixScreen = await open_screen(pilot, app, "f", FixScreen)
    await until(pilot, lambda: screen.plan is not None, what="the plan")
    return screen


async def start_ranks(pilot: Any, app: DoctorApp, command: str, nproc: int,
                      env: dict[str, str] | None = None) -> LaunchScreen:
    """Open the launch screen and start `nproc` ranks of `command` (with `env`, if given)."""
    screen: LaunchScreen = await open_screen(pilot, app, "l", LaunchScreen)
    screen.query_one("#command", Input).value = command
    screen.query_one("#nproc", Input).value = str(nproc)
    if env is not None:
        screen.build_spec = _with_env(screen.build_spec, env)  # type: ignore[method-assign]
    await click(pilot, screen.query_one("#start"))
    await until(pilot, lambda: screen.launcher is not None, what="the run to start")
    return screen


@pytest.fixture
def job(tmp_path: Path) -> Path:
    dst = tmp_path / "job"
    shutil.copytree(EXAMPLE, dst)
    return dst


@pytest.fixture
def ddp_job(tmp_path: Path) -> Path:
    folder = tmp_path / "ddp"
    folder.mkdir()
    (folder / "train.py").write_text(DDP_SCRIPT)
    return folder


def app_for(root: Path, env: dict[str, str] | None = None, playbook: str = "scorep-ddp",
            observe: bool = False) -> DoctorApp:
    """The app on `root`; `observe` as `gpu-doctor PATH` has it by default (bash runs the job script)."""
    case = Case(root=root, env=env if env is not None else dict(os.environ), options={"observe": observe})
    return make_app(case, Options(playbook=playbook, budget_s=CEILING_S, extra={"warmup": False, "grace_s": 2.0}))


def test_checks_fill_in_live_on_the_broken_example(job: Path, fake_node: Any) -> None:
    app = app_for(job, fake_node("healthy"))
    seen_running: list[str] = []

    async def body(pilot: Any) -> None:
        table = app.query_one("#checks", DataTable)
        assert table.row_count >= 20  # every check is listed before it runs
        await until(pilot, lambda: app.run_result is not None, what="the checks")
        seen_running.extend(app.results)
        verdict = plain(app.query_one("#verdict", Static))
        assert "NOT READY" in verdict
        assert "fail" in verdict

    run_app(app, body)
    assert app.results["GPU001"].status == Status.PASS  # the fake node's 4 GPUs
    assert app.results["SCP002"].status == Status.FAIL  # --cuda missing in job.sbatch
    assert app.results["LNC001"].status == Status.FAIL  # torchrun under python -m scorep
    assert set(seen_running) >= {"GPU003", "SCP003", "SCR001", "TRN001"}


def test_opening_a_finding_shows_its_evidence(job: Path) -> None:
    app = app_for(job, playbook="scorep-ddp", observe=True)

    async def body(pilot: Any) -> None:
        await until(pilot, lambda: app.run_result is not None, what="the checks")
        table = app.query_one("#checks", DataTable)
        table.move_cursor(row=table.get_row_index("SCP003"))
        await pilot.press("enter")
        screen = await screen_up(pilot, app, FindingScreen)
        text = "\n".join(plain(w) for w in screen.query(Static))
        assert "SCP003" in text
        assert "SCOREP_TOTAL_MEMORY" in text
        assert "job.sbatch" in text
        assert "scorep-total-memory" in text  # the remedy, with its safety
        # how the job model read the launch: the job script, then the command, its ranks and settings
        assert "How gpu-doctor read your launch" in text
        assert "SCOREP_TOTAL_MEMORY=4G" in text and "← job.sbatch:" in text
        # which reading: bash ran the job script in a sandbox (the default), else why only the static one
        from doctor.observe import sandbox

        assert ("read: observed: bash ran the job scripts in a sandbox" if sandbox.kind() else
                "read: static reading only: no sandbox here") in text, text
        ev = next(e for e in app.results["SCP003"].evidence if e.file and e.line)
        source = (job / ev.file if not Path(ev.file).is_absolute() else Path(ev.file)).read_text().splitlines()
        import re

        neighbour = next(ln.strip() for ln in reversed(source[:ev.line - 1]) if ln.strip())
        # the code around file:line is shown with its line numbers, not just the evidence line
        assert re.search(rf"\b{ev.line - 1}\s*[│|]?\s*{re.escape(neighbour)}", text), text
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, FindingScreen), what="back")

    run_app(app, body)


def test_fix_flow_applies_verifies_and_undo_restores(job: Path) -> None:
    sbatch = job / "job.sbatch"
    before = sbatch.read_bytes()
    app = app_for(job)

    async def body(pilot: Any) -> None:
        screen = await open_fix(pilot, app)
        from textual.widgets import SelectionList

        selected = screen.query_one("#fix-list", SelectionList).selected
        assert "scorep-total-memory" in selected  # safe: preselected
        assert "lazy-scorep-import" not in selected  # unsafe: opt-in
        diff = plain(screen.query_one("#fix-diff", Static))
        assert "3500M" in diff or "SCOREP_TOTAL_MEMORY" in diff
        await confirm_apply(pilot, app)
        await until(pilot, lambda: screen.changed, what="the apply")
        result = plain(screen.query_one("#fix-result", Static))
        assert "verified" in result
        assert "NOT verified" not in result
        assert sbatch.read_bytes() != before
        assert b"3500M" in sbatch.read_bytes()
        await pilot.press("u")
        await until(pilot, lambda: sbatch.read_bytes() == before, what="the undo")

    run_app(app, body)
    assert sbatch.read_bytes() == before


def test_launch_shows_both_ranks_finish(ddp_job: Path) -> None:
    app = app_for(ddp_job, playbook="post-run")

    async def body(pilot: Any) -> None:
        screen = await start_ranks(pilot, app, "train.py", 2)
        await until(pilot, lambda: screen.summary is not None, what="the run")
        table = screen.query_one("#ranks", DataTable)
        states = [str(table.get_cell(str(r), "state")) for r in range(2)]
        assert states == ["done", "done"]
        assert "5/5" in str(table.get_cell("0", "step"))
        from textual.widgets import Log

        log = screen.query_one("#rank-log", Log)  # the pane takes the last lines on its next tick
        await until(pilot, lambda: any("step 5/5" in line for line in log.lines), what="rank 0's last line")
        assert "exit 0" in plain(screen.query_one("#launch-verdict", Static))

    run_app(app, body)


def test_stopping_a_run_leaves_no_rank_process(ddp_job: Path) -> None:
    env = {**os.environ, "STEPS": "10000", "SLOW": "1"}
    case = Case(root=ddp_job, env=env)
    app = make_app(case, Options(playbook="post-run", budget_s=CEILING_S, extra={"warmup": False}))
    pids: list[int] = []

    async def body(pilot: Any) -> None:
        screen = await start_long_run(pilot, app, env)
        pids.extend(screen.launcher.pids().values())  # type: ignore[union-attr]
        await pilot.press("ctrl+c")  # inside Textual, ctrl+c is a key: it stops the ranks
        await until(pilot, lambda: screen.summary is not None, what="the stop")

    run_app(app, body)
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def start_long_run(pilot: Any, app: DoctorApp, env: dict[str, str]) -> LaunchScreen:
    """Open the launch screen, start 2 ranks of train.py with `env`, wait until both step."""
    screen = await start_ranks(pilot, app, "train.py", 2, env)
    await until(pilot, lambda: screen.launcher is not None
                and all((s.step or 0) >= 1 for s in screen.launcher.statuses()), what="steps")
    return screen


def _with_env(build: Callable[[], Any], env: dict[str, str]) -> Callable[[], Any]:
    import dataclasses

    return lambda: dataclasses.replace(build(), env=env)


def test_exporting_a_report_writes_the_file(job: Path, tmp_path: Path) -> None:
    target = tmp_path / "ticket.html"
    app = app_for(job)

    async def body(pilot: Any) -> None:
        screen = await open_screen(pilot, app, "e", ReportScreen)
        screen.query_one("#report-path", Input).value = str(target)
        await click(pilot, screen.query_one("#write"))
        await until(pilot, lambda: screen.written is not None, what="the report")

    run_app(app, body)
    html = target.read_text()
    assert "<html" in html.lower()
    assert "SCP003" in html


def test_gpu_sparklines_render_from_nvml_samples(ddp_job: Path) -> None:
    from doctor.launch.gpus import GpuSample

    class Monitor:
        def snapshot(self) -> tuple[tuple[GpuSample, ...], str | None]:
            return (GpuSample(0, "H100", 75, 40 * 2**30, 80 * 2**30),
                    GpuSample(1, "H100", 10, 8 * 2**30, 80 * 2**30)), None

        def stop(self) -> None:
            pass

    app = app_for(ddp_job, playbook="post-run")

    async def body(pilot: Any) -> None:
        screen = await open_screen(pilot, app, "l", LaunchScreen)
        screen.gpu_monitor = Monitor()
        screen.update_gpus()
        screen.update_gpus()
        from textual.widgets import Sparkline

        def lines() -> dict[str | None, list[float]]:
            return {s.id: list(s.data or []) for s in screen.query(Sparkline)}

        await until(pilot, lambda: len(lines()) == 4, what="two sparklines per GPU")
        assert lines()["gpu-0-util"] == [75.0, 75.0]
        assert lines()["gpu-1-mem"] == [10.0, 10.0]

    run_app(app, body)


def test_without_a_terminal_it_points_to_the_headless_modes(job: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "doctor", str(job)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=CEILING_S)
    assert proc.returncode == 2
    assert "--check-only" in proc.stderr
    assert "report" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_launch_screen_shows_where_the_time_went(tmp_path: Path) -> None:
    from timeline_tracegen import comm, compute, write_rank_trace

    from doctor.tui.launch import timeline_text

    # 1000 ticks of compute on stream 7 with an AllReduce fully hidden under it on stream 20.
    for rank in range(2):
        write_rank_trace(tmp_path / f"scorep_rank_{rank}", [compute(7, 0, 1000), comm(20, 200, 600)],
                         resolution=1000)
    progress: list[str] = []
    text = timeline_text(tmp_path, on_progress=progress.append)
    print(text)
    assert "exposed" in text.lower()
    assert "scorep_rank_1" in text or "rank 1" in text.lower()
    # The reading's progress, as the launch screen shows it while the ranks' traces are read.
    assert [line.split("]")[0] for line in progress if " events" in line] == ["[1/2", "[2/2"], progress


def test_launch_screen_time_breakdown_never_raises(tmp_path: Path) -> None:
    from doctor.tui.launch import timeline_text

    (tmp_path / "scorep_rank_0").mkdir()
    (tmp_path / "scorep_rank_0" / "traces.otf2").write_bytes(b"not a trace")
    text = timeline_text(tmp_path)
    assert text.startswith("(no time breakdown: ")
    assert "traces.otf2" in text


def test_sigterm_stops_the_ranks_and_exits_cleanly(ddp_job: Path) -> None:
    env = {**os.environ, "STEPS": "10000", "SLOW": "1"}
    app = make_app(Case(root=ddp_job, env=env), Options(playbook="post-run", budget_s=CEILING_S,
                                                        extra={"warmup": False}))
    pids: list[int] = []

    async def body(pilot: Any) -> None:
        screen = await start_long_run(pilot, app, env)
        pids.extend(screen.launcher.pids().values())  # type: ignore[union-attr]
        os.kill(os.getpid(), signal.SIGTERM)  # the app's own handler: stop the ranks, then exit
        await until(pilot, lambda: app.return_code is not None, what="the exit")

    run_app(app, body)
    assert app.return_value == 130
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_the_real_app_in_a_terminal_exits_on_sighup(job: Path) -> None:
    import pty
    import select

    pid, fd = pty.fork()
    if pid == 0:  # the child: gpu-doctor in a real (pseudo) terminal
        os.execv(sys.executable, [sys.executable, "-m", "doctor", str(job), "--playbook", "post-run"])
    import re

    # The verdict line is drawn only once the app is mounted, and so has its signal handlers:
    # a SIGHUP before that would be the default one (killed, not a clean exit).
    drawn = re.compile(rb"CHECKING|READY")
    seen = b""
    deadline = time.monotonic() + CEILING_S
    while not drawn.search(seen) and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:
                break
    assert drawn.search(seen), seen[-500:]
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + CEILING_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                os.read(fd, 65536)
            except OSError:
                pass
    else:
        os.kill(pid, signal.SIGKILL)
        raise AssertionError("the app did not exit on SIGHUP")
    os.close(fd)
    assert os.WIFEXITED(status), status
    assert os.WEXITSTATUS(status) == 130


def test_rank_lines_with_brackets_show_as_printed_and_the_stop_key_works(tmp_path: Path) -> None:
    """Rank output is text, not markup: `[rank0]:` stays, `[/data]` does not crash the app;
    after Start the rank table has the focus, so `s` stops the run instead of typing into the form."""
    line = "[rank0]: epoch [/data/set] [bold]done[/bold] and a tail long enough to need a wide column"
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "talk.py").write_text(f"import time\nprint({line!r}, flush=True)\ntime.sleep(600)\n")
    app = make_app(Case(root=folder, env=dict(os.environ)),
                   Options(playbook="post-run", budget_s=CEILING_S, extra={"warmup": False}))

    async def body(pilot: Any) -> None:
        screen = await start_ranks(pilot, app, "talk.py", 1)
        table = screen.query_one("#ranks", DataTable)
        await until(pilot, lambda: "epoch" in str(table.get_cell("0", "last")), what="the rank's line")
        # drawn on the screen as printed (a markup parse would raise here, or garble it)
        await until(pilot, lambda: line[-80:] in table.render_line(1).text, what="the row drawn")
        assert app.is_running
        await focus_on(pilot, app, table)  # Start hands the focus to the rank table
        from textual.widgets._data_table import default_cell_formatter

        shown = default_cell_formatter(table.get_cell("0", "last"))  # what the table draws
        assert isinstance(shown, Text) and shown.plain == line[-80:]
        assert table.ordered_columns[-1].width >= 80
        verdict = screen.query_one("#launch-verdict", Static)
        await until(pilot, lambda: plain(verdict).startswith("running: s (or ctrl+c) stops"), what="the hint")
        await pilot.press("s")
        await until(pilot, lambda: screen.summary is not None, what="the stop")
        assert screen.query_one("#command", Input).value == "talk.py"

    run_app(app, body, size=(200, 45))


def _long_talker(tmp_path: Path) -> DoctorApp:
    folder = tmp_path / "job"
    folder.mkdir(exist_ok=True)
    (folder / "talk.py").write_text("import time\nprint('step 1/9', flush=True)\ntime.sleep(600)\n")
    return make_app(Case(root=folder, env=dict(os.environ)),
                    Options(playbook="post-run", budget_s=CEILING_S, extra={"warmup": False}))


def test_quitting_with_q_during_a_run_stops_the_ranks_and_exits(tmp_path: Path) -> None:
    app = _long_talker(tmp_path)
    pids: list[int] = []

    async def body(pilot: Any) -> None:
        screen = await start_ranks(pilot, app, "talk.py", 2)
        await until(pilot, lambda: screen.launcher is not None and len(screen.launcher.pids()) == 2
                    and all(s.last_line for s in screen.launcher.statuses()), what="both ranks")
        pids.extend(screen.launcher.pids().values())  # type: ignore[union-attr]
        await focus_on(pilot, app, screen.query_one("#ranks"))
        await pilot.press("q")  # focus is on the rank table: q reaches the app
        await until(pilot, lambda: app.return_code is not None, what="the app to quit")

    run_app(app, body)
    summary = app.launch_screen.launcher.wait(0)  # type: ignore[attr-defined]
    assert summary is not None and summary.exit_code == 130, "the ranks ran on instead of being stopped"
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_report_error_naming_a_bracketed_path_is_shown_verbatim(job: Path, tmp_path: Path) -> None:
    target = tmp_path / "[/x]" / "ticket.md"  # its folder does not exist: the error names it
    app = app_for(job)

    async def body(pilot: Any) -> None:
        screen = await open_screen(pilot, app, "e", ReportScreen)
        screen.query_one("#report-path", Input).value = str(target)
        await click(pilot, screen.query_one("#write"))
        status = screen.query_one("#report-status", Static)

        def shown() -> str:
            return " ".join(plain(status).split())

        await until(pilot, lambda: "does not exist" in shown(), what="the error")
        await until(pilot, lambda: "does not exist" in "".join(status.render_line(y).text for y in range(3)),
                    what="the error drawn")  # as text: a markup parse of "[/x]" would raise
        assert app.is_running
        assert f"folder {target.parent} does not exist" in shown()

    run_app(app, body)


def test_space_toggles_the_first_remedy_at_once_also_after_an_apply(job: Path) -> None:
    """The list shows a highlighted row from the start and after each re-plan: the first key acts."""
    from textual.widgets import SelectionList

    app = app_for(job)

    async def body(pilot: Any) -> None:
        screen = await open_fix(pilot, app)
        sel = screen.query_one("#fix-list", SelectionList)
        first = sel.get_option_at_index(0).value
        await focus_on(pilot, app, sel)
        assert first in sel.selected  # a safe remedy, preselected
        await pilot.press("space")
        await until(pilot, lambda: first not in sel.selected, what="space to take the first remedy out")
        await pilot.press("space")
        await until(pilot, lambda: first in sel.selected, what="space to put it back")
        await confirm_apply(pilot, app)
        await until(pilot, lambda: screen.changed, what="the apply")
        await until(pilot, lambda: sel.option_count and first not in [sel.get_option_at_index(i).value
                                                                      for i in range(sel.option_count)],
                    what="the re-plan")
        await focus_on(pilot, app, sel)
        now_first = sel.get_option_at_index(0).value
        assert now_first not in sel.selected  # unsafe: not preselected
        await pilot.press("space")
        await until(pilot, lambda: now_first in sel.selected, what="space to select the first row")

    run_app(app, body)


def test_launch_key_during_a_run_keeps_the_running_screen_so_quit_still_stops_it(tmp_path: Path) -> None:
    app = _long_talker(tmp_path)
    pids: list[int] = []

    async def body(pilot: Any) -> None:
        screen = await start_ranks(pilot, app, "talk.py", 1)
        await until(pilot, lambda: screen.launcher is not None and bool(screen.launcher.pids()), what="the rank")
        pids.extend(screen.launcher.pids().values())  # type: ignore[union-attr]
        await pilot.press("l")
        await until(pilot, lambda: any("A run is going" in str(n.message) for n in app._notifications),
                    what="the app to say a run is going")
        assert app.screen is screen
        await pilot.press("q")
        await until(pilot, lambda: app.return_code is not None, what="the app to quit")

    run_app(app, body)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_applying_a_fix_from_a_finding_returns_to_the_live_overview(job: Path) -> None:
    app = app_for(job)

    async def body(pilot: Any) -> None:
        await until(pilot, lambda: app.run_result is not None, what="the checks")
        table = app.query_one("#checks", DataTable)
        table.move_cursor(row=table.get_row_index("SCP003"))
        await pilot.press("enter")
        await screen_up(pilot, app, FindingScreen)
        fix = await open_fix(pilot, app)
        await confirm_apply(pilot, app)
        await until(pilot, lambda: fix.changed, what="the apply")
        before = app.run_result
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, (FixScreen, FindingScreen)), what="the overview")
        await rerun_done(pilot, app, before)
        assert app.results["SCP003"].status == Status.PASS, (app.results["SCP003"].message, app.results["SCP003"].evidence)  # the overview shows the fixed state

    run_app(app, body)
