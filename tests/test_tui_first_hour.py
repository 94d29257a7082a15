"""The app as a newcomer meets it (issue 17), driven with Textual's Pilot on copies of the examples:
the fix plan is `gpu-doctor fix PATH`'s and stays fresh after apply and undo, the report dialog
closes, the finding column refits, the catalogue's Example keeps its lines, nothing checked is
not READY, help, the palette, the launch form's labels, visible unselected boxes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")

from examples_util import EXAMPLES
from textual.widgets import Checkbox, DataTable, Input, SelectionList, Static  # noqa: E402
from tui_pilot import (  # noqa: E402
    CEILING_S,
    checks_done,
    confirm_apply,
    focus_on,
    open_screen,
    palette,
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
LISTED = re.compile(r"^  (safe|unsafe|manual)\s+(\S+)\s+.*?(?:\((manual steps|needs --unsafe|nothing to do|"
                    r"cannot apply here)\))?$")


async def open_fix(pilot: Any, app: DoctorApp) -> FixScreen:
    screen = await open_screen(pilot, app, "f", FixScreen)
    await until(pilot, lambda: screen.plan is not None, what="the plan")
    return screen


async def replan(pilot: Any, app: DoctorApp, screen: FixScreen, key: str) -> None:
    """Apply (a, confirmed) or undo (u), then wait until the screen has planned afresh."""
    before = screen.plan
    if key == "a":
        await confirm_apply(pilot, app)
    else:
        await pilot.press(key)
    await until(pilot, lambda: screen.plan is not before and not app.workers, what=f"a new plan after {key}")


def app_for(root: Path, playbook: str = "scorep-ddp") -> DoctorApp:
    return make_app(Case(root=root, env=dict(os.environ)), Options(playbook=playbook, budget_s=CEILING_S))


@pytest.fixture
def job(tmp_path: Path) -> Path:
    dst = tmp_path / "job"
    shutil.copytree(EXAMPLES / "scorep-ddp-broken", dst)
    return dst


def cli_plan(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """`gpu-doctor fix PATH`: ([(safety, remedy) to apply or needing --unsafe], [remedies with manual steps])."""
    proc = subprocess.run([sys.executable, "-m", "doctor", "fix", str(root), "-q"], capture_output=True,
                          text=True, timeout=CEILING_S, cwd=REPO)
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
        await replan(pilot, app, screen, "a")  # apply the safe ones
        seen["applied"] = app_plan(screen)
        before = app.run_result
        await pilot.press("escape")  # back: the overview re-runs the checks
        await rerun_done(pilot, app, before)
        seen["lnc002"] = app.results["LNC002"].status, app.results["LNC002"].message
        screen = await open_fix(pilot, app)  # a fresh screen, opened on the fixed job
        await replan(pilot, app, screen, "u")
        seen["undone"] = app_plan(screen)
        seen["summary"] = plain(screen.query_one("#fix-summary", Static))

    run_app(app, body)
    first_offered, first_selected, _ = seen["first"]
    assert "cuda-warmup" in first_selected
    assert not any(s == "safe" for s, _ in seen["applied"][0]), seen  # applied: no safe remedy left to offer
    assert seen["lnc002"][0] == Status.PASS, seen["lnc002"]  # the warm-up was applied with the rest
    assert seen["undone"][0] == first_offered  # the undone remedies come back...
    assert f" of {len(first_offered)} remedies selected to apply" in seen["summary"]  # ...and the count with them


def test_an_undo_while_the_plan_after_an_apply_is_made_shows_the_undone_plan(
        job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan asked for last is the one shown: `u` pressed while the plan after an apply is still
    being made must not be overwritten by that older plan (it would offer the undone remedies as done)."""
    import threading

    from doctor.remedy import verify

    real = verify.check_and_plan
    calls: list[int] = []
    made, release, answered = threading.Event(), threading.Event(), threading.Event()
    held: list[threading.Thread] = []

    def check_and_plan(case: Case, **kw: Any) -> Any:
        from textual.worker import NoActiveWorker, get_current_worker

        try:
            planning = get_current_worker().description == "planning remedies"
        except NoActiveWorker:
            planning = False
        if not planning:  # the apply's own re-check
            return real(case, **kw)
        calls.append(1)
        result = real(case, **kw)
        if len(calls) == 2:  # the plan after the apply: made, then held until the undo's plan is shown
            held.append(threading.current_thread())
            made.set()
            release.wait(CEILING_S)
        return result

    monkeypatch.setattr(verify, "check_and_plan", check_and_plan)
    app = app_for(job)
    to_app = app.call_from_thread

    def call_from_thread(callback: Any, *args: Any, **kw: Any) -> Any:
        done = to_app(callback, *args, **kw)
        if threading.current_thread() in held:
            answered.set()  # the held plan's answer reached the screen (and was shown, or not)
        return done

    app.call_from_thread = call_from_thread  # type: ignore[method-assign]
    seen: dict[str, Any] = {}

    async def body(pilot: Any) -> None:
        screen = await open_fix(pilot, app)
        seen["first"], first = app_plan(screen)[0], screen.plan
        await confirm_apply(pilot, app)
        await until(pilot, made.is_set, what="the plan after the apply")
        await pilot.press("u")
        await until(pilot, lambda: screen.plan is not first, what="the undone plan")
        release.set()
        await until(pilot, answered.is_set, what="the held plan's answer")
        seen["shown"] = app_plan(screen)[0]

    try:
        run_app(app, body)
    finally:
        release.set()
    assert seen["shown"] == seen["first"]


def test_the_report_dialog_closes_once_written(job: Path) -> None:
    app = app_for(job)
    target = job / "gpu-doctor-report.html"

    async def body(pilot: Any) -> None:
        dialog = await open_screen(pilot, app, "e", ReportScreen)
        field = dialog.query_one("#report-path", Input)
        assert field.value == str(target)
        form = dialog.query_one("#report-form")
        await until(pilot, lambda: form.region.area > 0, what="the dialog drawn")
        assert form.region.height < app.size.height // 2, form.region  # a box: the overview stays in view
        await focus_on(pilot, app, field)
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
        # What the user sees is the column refitted to the new width: wait for that, not a pause.
        await pilot.resize_terminal(80, 24)
        await until(pilot, lambda: app.size == (80, 24) and column.width < 60, what="the column to fit 80x24")
        widths.append(column.width)
        await pilot.resize_terminal(160, 45)
        await until(pilot, lambda: app.size == (160, 45) and column.width > 110, what="the column to widen")
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
        screen = await screen_up(pilot, app, FindingScreen)
        text.append(plain(screen.query_one("#explain", Static)))

    run_app(app, body)
    lines = [ln.strip() for ln in text[0].splitlines()]
    assert "export SCOREP_CUDA_ENABLE=kernel,memcpy,sync" in lines  # one command a line, as in the catalogue
    assert "python -m scorep --thread=pthread train.py" in lines


def test_a_folder_with_nothing_to_check_is_not_ready(tmp_path: Path) -> None:
    app = app_for(tmp_path)
    verdict: list[str] = []

    async def body(pilot: Any) -> None:
        await checks_done(pilot, app)
        verdict.append(plain(app.query_one("#verdict", Static)))

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
            helped = await screen_up(pilot, app, HelpScreen)
            shown.append(" ".join(plain(s) for s in helped.query(Static)))
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, HelpScreen), what="help to close")

    run_app(app, body)
    for text in shown:
        for key, what in (("f", "Fix"), ("u", "Undo"), ("l", "Launch"), ("e", "Export report"), ("q", "Quit"),
                          ("ctrl+c", "Stop/Quit"),
                          ("enter", "open the highlighted check"), ("space", "select or unselect")):
            assert re.search(rf"\b{re.escape(key)}\b.*{re.escape(what)}", text), (key, text)


def test_the_palette_finds_checks_by_id_and_the_timeline(job: Path) -> None:
    from doctor.tui.timeline import TimelineScreen

    app = app_for(job)
    opened: list[Any] = []

    async def body(pilot: Any) -> None:
        await checks_done(pilot, app)
        await palette(pilot, app, "SCP002")
        finding = await screen_up(pilot, app, FindingScreen)
        opened.append(finding.result.check_id)
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, FindingScreen), what="back to the overview")
        await palette(pilot, app, "timeline")
        screen = await screen_up(pilot, app, TimelineScreen)
        await until(pilot, lambda: screen.text is not None, what="the breakdown")
        opened.append(screen.text)

    run_app(app, body)
    assert opened[0] == "SCP002"
    assert opened[1].startswith("No Score-P measurement in")  # no traces in this folder: said, not a traceback


def test_the_launch_form_fields_are_labelled(job: Path) -> None:
    app = app_for(job)
    labels: dict[str, str] = {}

    async def body(pilot: Any) -> None:
        screen = await open_screen(pilot, app, "l", LaunchScreen)
        for wid in ("command", "nproc", "instrument"):
            labels[wid] = str(screen.query_one(f"#{wid}").border_title or "")
        labels["warmup"] = str(screen.query_one("#warmup", Checkbox).label)

    run_app(app, body)
    assert labels == {"command": "training script and its arguments", "nproc": "ranks",
                      "instrument": "measurement", "warmup": "CUDA warm-up"}


def test_unselected_remedies_show_an_empty_box(job: Path) -> None:
    app = app_for(job)
    rows: dict[str, str] = {}

    async def body(pilot: Any) -> None:
        screen = await open_fix(pilot, app)
        sel = screen.query_one("#fix-list", SelectionList)
        await until(pilot, lambda: sel.size.height >= sel.option_count > 0
                    and all(sel.render_line(i).text.strip() for i in range(sel.option_count)), what="the list drawn")
        for i in range(sel.option_count):
            rows[str(sel.get_option_at_index(i).value)] = sel.render_line(i).text

    run_app(app, body)
    assert rows["scorep-add-cuda"].startswith("▐X▌")
    assert rows["per-rank-launch"].startswith("▐ ▌"), rows["per-rank-launch"]


def test_a_box_that_is_off_is_drawn_empty(job: Path) -> None:
    """The launch form's warm-up and the export dialog's host hashing: `▐X▌` on, `▐ ▌` off
    (Textual draws a dim X for off, which reads as ticked)."""
    app = app_for(job)
    drawn: dict[str, str] = {}

    async def body(pilot: Any) -> None:
        launch = await open_screen(pilot, app, "l", LaunchScreen)
        warmup = launch.query_one("#warmup", Checkbox)
        drawn["warm-up on"] = warmup.render().plain
        warmup.value = False
        drawn["warm-up off"] = warmup.render().plain
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, LaunchScreen), what="the overview")
        dialog = await open_screen(pilot, app, "e", ReportScreen)
        drawn["hash hosts off"] = dialog.query_one("#hash-hosts", Checkbox).render().plain

    run_app(app, body)
    assert drawn == {"warm-up on": "▐X▌ CUDA warm-up ", "warm-up off": "▐ ▌ CUDA warm-up ",
                     "hash hosts off": "▐ ▌ Hash host names "}, drawn
