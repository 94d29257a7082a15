"""The diagnosis in the app: it opens on the first root cause, lists what each explains, has a
problems-only view, and a finding's screen says what it explains and what explains it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")

from diagnosis_util import seed_chain  # noqa: E402
from textual.widgets import DataTable, Static  # noqa: E402
from tui_pilot import CEILING_S, click, plain, run_app, screen_up, until  # noqa: E402

from doctor.case import Case  # noqa: E402
from doctor.tui.app import DoctorApp, make_app  # noqa: E402
from doctor.tui.finding import FindingScreen  # noqa: E402
from doctor.tui.fix import FixScreen  # noqa: E402
from doctor.tui.options import Options  # noqa: E402


def cursor_check(app: DoctorApp) -> str:
    table = app.query_one("#checks", DataTable)
    return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)


def test_the_app_opens_on_the_first_root_cause_and_shows_the_chain(tmp_path: Path) -> None:
    root = seed_chain(tmp_path / "dnabert2")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCOREP_", "SLURM_"))}
    app = make_app(Case(root=root, env=env), Options(playbook="scorep-ddp", budget_s=CEILING_S))

    async def body(pilot: Any) -> None:
        await until(pilot, lambda: app.diagnosis is not None, "the diagnosis")
        panel = plain(app.query_one("#diagnosis", Static))
        assert "root cause SCR002 fail" in panel and "root cause SCR001 fail" in panel
        assert "explains: ART003 fail, ART004 (nccl_watchdog_teardown) fail" in panel
        assert "explains: ART004 (fp16_valueerror) fail" in panel
        assert "next: gpu-doctor fix" in panel
        assert cursor_check(app) == "SCR002"  # not the skipped node rows at the top

        await pilot.press("p")  # problems only
        await until(pilot, lambda: app.problems_only, "the problems-only view")
        table = app.query_one("#checks", DataTable)
        assert {k.value for k in table.rows} == {"SCP001", "SCR001", "SCR002", "LNC001", "ART003", "ART004"}  # SCP001: unknown
        assert cursor_check(app) == "SCR002"

        await pilot.press("enter")
        finding = await screen_up(pilot, app, FindingScreen)
        links = plain(finding.query_one("#finding-links", Static))
        assert "explains ART003 fail: 3 of 4 ranks left a complete measurement" in links
        assert "explains ART004 (nccl_watchdog_teardown) fail" in links
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, FindingScreen), "back")

        table.move_cursor(row=table.get_row_index("ART004"))
        await pilot.press("enter")
        finding = await screen_up(pilot, app, FindingScreen)
        links = plain(finding.query_one("#finding-links", Static))
        assert "explained by SCR001 fail: scorep imported at module level in train.py" in links
        assert "explained by SCR002 fail" in links
        assert "next: gpu-doctor fix" in links

    run_app(app, body, size=(150, 45))


RANKS = """\
import os, sys, time
rank = int(os.environ["RANK"])
print(f"rank {rank} starting", flush=True)
if rank == 1:
    print("ValueError: --load_best_model_at_end requires the save and eval strategy to match, but found", flush=True)
    print("- Evaluation strategy: IntervalStrategy.NO", flush=True)
    print("- Save strategy: SaveStrategy.STEPS", flush=True)
    sys.exit(1)
time.sleep(30)  # stopped by the launcher once rank 1 failed
"""


def test_the_launch_screen_names_the_check_of_a_rank_that_died(tmp_path: Path) -> None:
    from textual.widgets import Input

    from doctor.tui.launch import LaunchScreen

    (tmp_path / "train.py").write_text(RANKS)
    app = make_app(Case(root=tmp_path, env=dict(os.environ)),
                   Options(playbook="post-run", budget_s=CEILING_S, extra={"warmup": False, "grace_s": 0.5}))

    async def body(pilot: Any) -> None:
        await until(pilot, lambda: app.run_result is not None, "the checks")
        await pilot.press("l")
        screen = await screen_up(pilot, app, LaunchScreen)
        screen.query_one("#command", Input).value = "train.py"
        screen.query_one("#nproc", Input).value = "2"
        await click(pilot, screen.query_one("#start"))
        await until(pilot, lambda: screen.summary is not None, "the run")
        verdict = plain(screen.query_one("#launch-verdict", Static))
        assert "rank 1: TRN001 — press f (load_best_model_at_end needs matching strategies" in verdict, verdict
        await pilot.press("f")  # what the line says to do
        await screen_up(pilot, app, FixScreen)

    run_app(app, body, size=(150, 45))
