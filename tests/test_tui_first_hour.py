"""The app as a newcomer meets it (issue 17), driven with Textual's Pilot on copies of the examples:
the fix plan is `gpu-doctor fix PATH`'s and stays fresh after apply and undo, the report dialog
closes, the finding column refits, the catalogue's Example keeps its lines, nothing checked is
not READY, help, the palette, the launch form's labels, visible unselected boxes.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")

from rich.console import Console  # noqa: E402
from textual.widgets import Checkbox, DataTable, Input, SelectionList, Static  # noqa: E402

from doctor.case import Case  # noqa: E402
from doctor.model import Status  # noqa: E402
from doctor.tui.app import DoctorApp, Options, make_app  # noqa: E402
from doctor.tui.finding import FindingScreen  # noqa: E402
from doctor.tui.fix import FixScreen  # noqa: E402
from doctor.tui.launch import LaunchScreen  # noqa: E402
from doctor.tui.report import ReportScreen  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
LISTED = re.compile(r"^  (safe|unsafe|manual)\s+(\S+)\s+.*?(?:\((manual steps|needs --unsafe|nothing to do|"
                    r"cannot apply here)\))?$")


def plain(renderable: Any, width: int = 200) -> str:
    console = Console(width=width, record=True, file=open(os.devnull, "w"), color_system=None)
    console.print(renderable)
    return console.export_text()


def run_app(app: DoctorApp, body: Callable[[Any], Awaitable[None]], size: tuple[int, int] = (160, 45)) -> None:
    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await body(pilot)
    asyncio.run(main())


async def until(pilot: Any, predicate: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        await pilot.pause(0.05)


async def checks_done(pilot: Any, app: DoctorApp) -> None:
    await until(pilot, lambda: app.run_result is not None, what="the checks")


async def open_fix(pilot: Any, app: DoctorApp) -> FixScreen:
    await checks_done(pilot, app)
    await pilot.press("f")
    await until(pilot, lambda: isinstance(app.screen, FixScreen), what="the fix screen")
    screen = app.screen
    assert isinstance(screen, FixScreen)
    await until(pilot, lambda: screen.plan is not None, what="the plan")
    return screen


async def replan(pilot: Any, screen: FixScreen, key: str) -> None:
    """Press `key` (a then y, or u) and wait until the screen has planned afresh."""
    before = screen.plan
    for k in key:
        await pilot.press(k)
        await pilot.pause(0.1)
    await until(pilot, lambda: screen.plan is not before and not screen.app.workers, what=f"a new plan after {key}")


def app_for(root: Path, playbook: str = "scorep-ddp") -> DoctorApp:
    return make_app(Case(root=root, env=dict(os.environ)), Options(playbook=playbook, budget_s=60))


@pytest.fixture
def job(tmp_path: Path) -> Path:
    dst = tmp_path / "job"
    shutil.copytree(EXAMPLES / "scorep-ddp-broken", dst)
    return dst


def cli_plan(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """`gpu-doctor fix PATH`: ([(safety, remedy) to apply or needing --unsafe], [remedies with manual steps])."""
    proc = subprocess.run([sys.executable, "-m", "doctor", "fix", str(root), "-q"], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    offered, manual = [], []
    for line in proc.stdout.splitlines():
        m = LISTED.match(line)
        if m is None:
            continue
        safety, rid, state = m.groups()
        if state in ("manual steps", "cannot apply here"):
            manual.append(rid)
        elif state in (None, "needs --unsafe"):
            offered.append((safety, rid))
    return offered, manual


def app_plan(screen: FixScreen) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """What the fix screen offers, which of it is preselected, and what it shows as manual steps."""
    sel = screen.query_one("#fix-list", SelectionList)
    offered = [(rp.safety.value, rp.remedy_id) for rp in screen.offered()]
    assert [str(sel.get_option_at_index(i).value) for i in range(sel.option_count)] == [r for _, r in offered]
    return offered, [str(v) for v in sel.selected], [rp.remedy_id for rp in screen.manual()]


@pytest.mark.parametrize("example", ["scorep-ddp-broken", "scorep-ddp-fixed"])
def test_the_app_offers_the_plan_of_gpu_doctor_fix(tmp_path: Path, example: str) -> None:
    root = tmp_path / example
    shutil.copytree(EXAMPLES / example, root)
    want_offered, want_manual = cli_plan(root)
    app = app_for(root)
    got: dict[str, Any] = {}

    async def body(pilot: Any) -> None:
        screen = await open_fix(pilot, app)
        got["plan"] = app_plan(screen)

    run_app(app, body)
    offered, selected, manual = got["plan"]
    assert offered == want_offered
    assert manual == want_manual
    assert selected == [rid for safety, rid in want_offered if safety == "safe"]
    if example == "scorep-ddp-broken":
        assert ("safe", "cuda-warmup") in offered  # LNC002's remedy: the app used to leave it out


def test_after_apply_and_undo_the_list_is_planned_afresh(job: Path) -> None:
    app = app_for(job)
    seen: dict[str, Any] = {}

    async def body(pilot: Any) -> None:
        screen = await open_fix(pilot, app)
        seen["first"] = app_plan(screen)
        await replan(pilot, screen, "ay")  # apply the safe ones
        seen["applied"] = app_plan(screen)
        await pilot.press("escape")  # back: the overview re-runs the checks
        await until(pilot, lambda: app.run_result is not None and not app.checks_running, what="the re-run")
        seen["lnc002"] = app.results["LNC002"].status
        screen = await open_fix(pilot, app)  # a fresh screen, opened on the fixed job
        await replan(pilot, screen, "u")
        seen["undone"] = app_plan(screen)
        seen["summary"] = plain(screen.query_one("#fix-summary", Static).content)

    run_app(app, body)
    first_offered, first_selected, _ = seen["first"]
    assert "cuda-warmup" in first_selected
    assert not any(s == "safe" for s, _ in seen["applied"][0]), seen  # applied: no safe remedy left to offer
    assert seen["lnc002"] == Status.PASS  # the warm-up was applied with the rest
    assert seen["undone"][0] == first_offered  # the undone remedies come back...
    assert seen["summary"].startswith(f"{len(first_offered)} remedies to apply")  # ...and the count with them


def test_the_report_dialog_closes_once_written(job: Path) -> None:
    app = app_for(job)
    target = job / "gpu-doctor-report.html"

    async def body(pilot: Any) -> None:
        await checks_done(pilot, app)
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, ReportScreen), what="the report dialog")
        assert app.screen.query_one("#report-path", Input).value == str(target)
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, ReportScreen), what="the dialog to close")
        assert any(f"report written: {target}" in str(n.message) for n in app._notifications)

    run_app(app, body)
    assert target.read_text().startswith("<!DOCTYPE html>")


def test_the_finding_column_refits_after_a_resize(job: Path) -> None:
    app = app_for(job)
    widths: list[int] = []

    async def body(pilot: Any) -> None:
        await checks_done(pilot, app)
        table = app.query_one("#checks", DataTable)
        column = next(c for k, c in table.columns.items() if k.value == "message")
        for size in ((80, 24), (160, 45)):
            await pilot.resize_terminal(*size)
            await pilot.pause(0.3)
            widths.append(column.width)

    run_app(app, body, size=(160, 45))
    small, large = widths
    assert small < 60 and large > 110, widths


def test_about_this_check_keeps_the_example_lines(job: Path) -> None:
    app = app_for(job)
    text: list[str] = []

    async def body(pilot: Any) -> None:
        await checks_done(pilot, app)
        app.open_check("SCP002")
        await until(pilot, lambda: isinstance(app.screen, FindingScreen) and bool(app.screen.query("#explain")),
                    what="the finding")
        text.append(plain(app.screen.query_one("#explain", Static).content))

    run_app(app, body)
    lines = [ln.strip() for ln in text[0].splitlines()]
    assert "export SCOREP_CUDA_ENABLE=kernel,memcpy,sync" in lines  # one command a line, as in the catalogue
    assert "python -m scorep --thread=pthread train.py" in lines


def test_a_folder_with_nothing_to_check_is_not_ready(tmp_path: Path) -> None:
    app = app_for(tmp_path)
    verdict: list[str] = []

    async def body(pilot: Any) -> None:
        await checks_done(pilot, app)
        await pilot.pause()
        verdict.append(plain(app.query_one("#verdict", Static).content))

    run_app(app, body)
    assert all(r.status == Status.SKIP for r in app.results.values())
    assert "NOTHING CHECKED" in verdict[0] and " READY " not in verdict[0].replace("NOT READY", "")
    assert f"no job found in {tmp_path}" in verdict[0]


def test_help_lists_the_keys_of_the_screen(job: Path) -> None:
    from doctor.tui.help import HelpScreen

    app = app_for(job)
    shown: list[str] = []

    async def body(pilot: Any) -> None:
        await checks_done(pilot, app)
        for key in ("question_mark", "f1"):
            await pilot.press(key)
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), what=f"help after {key}")
            shown.append(" ".join(plain(s.content) for s in app.screen.query(Static)))
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, HelpScreen), what="help to close")

    run_app(app, body)
    for text in shown:
        for key, what in (("f", "Fix"), ("u", "Undo"), ("l", "Launch"), ("e", "Export report"), ("q", "Quit"),
                          ("enter", "open the highlighted check"), ("space", "select or unselect")):
            assert re.search(rf"\b{re.escape(key)}\b.*{re.escape(what)}", text), (key, text)


async def palette(pilot: Any, app: DoctorApp, query: str) -> None:
    await pilot.press("ctrl+p")
    await pilot.pause(0.3)
    await pilot.press(*query)
    await pilot.pause(0.6)
    await pilot.press("enter")


def test_the_palette_finds_checks_by_id_and_the_timeline(job: Path) -> None:
    from doctor.tui.timeline import TimelineScreen

    app = app_for(job)
    opened: list[Any] = []

    async def body(pilot: Any) -> None:
        await checks_done(pilot, app)
        await palette(pilot, app, "SCP002")
        await until(pilot, lambda: isinstance(app.screen, FindingScreen), what="SCP002 from the palette")
        opened.append(app.screen.result.check_id)
        await pilot.press("escape")
        await palette(pilot, app, "timeline")
        await until(pilot, lambda: isinstance(app.screen, TimelineScreen), what="the timeline")
        screen = app.screen
        await until(pilot, lambda: screen.text is not None, what="the breakdown")
        opened.append(screen.text)

    run_app(app, body)
    assert opened[0] == "SCP002"
    assert opened[1].startswith("(no time breakdown:")  # no traces in this folder: said, not a traceback


def test_the_launch_form_fields_are_labelled(job: Path) -> None:
    app = app_for(job)
    labels: dict[str, str] = {}

    async def body(pilot: Any) -> None:
        await checks_done(pilot, app)
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch screen")
        for wid in ("command", "nproc", "instrument"):
            labels[wid] = str(app.screen.query_one(f"#{wid}").border_title or "")
        labels["warmup"] = str(app.screen.query_one("#warmup", Checkbox).label)

    run_app(app, body)
    assert labels == {"command": "training script and its arguments", "nproc": "ranks",
                      "instrument": "measurement", "warmup": "CUDA warm-up"}


def test_unselected_remedies_show_an_empty_box(job: Path) -> None:
    app = app_for(job)
    rows: dict[str, str] = {}

    async def body(pilot: Any) -> None:
        screen = await open_fix(pilot, app)
        sel = screen.query_one("#fix-list", SelectionList)
        await pilot.pause()
        for i in range(sel.option_count):
            rows[str(sel.get_option_at_index(i).value)] = sel.render_line(i).text

    run_app(app, body)
    assert rows["scorep-add-cuda"].startswith("▐X▌")
    assert rows["per-rank-launch"].startswith("▐ ▌"), rows["per-rank-launch"]
