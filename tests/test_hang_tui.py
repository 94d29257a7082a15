"""The launch screen's stall watch: "stalled 5s: rank 1 diverged (DataLoader)" with the grouped stacks,
and `k` samples every rank now. Real gloo ranks (tests/hang_jobs/train.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")
pytest.importorskip("torch")

from test_tui import start_ranks  # noqa: E402
from tui_pilot import CEILING_S, plain, run_app, until  # noqa: E402

from doctor.case import Case  # noqa: E402
from doctor.tui.app import Options, make_app  # noqa: E402

pytestmark = pytest.mark.slow
JOB = Path(__file__).resolve().parent / "hang_jobs" / "train.py"


def test_launch_screen_shows_the_stall_verdict_and_k_samples_again(tmp_path: Path) -> None:
    shutil.copy(JOB, tmp_path / "train.py")
    case = Case(root=tmp_path, env=dict(os.environ))
    app = make_app(case, Options(playbook="post-run", budget_s=CEILING_S,
                                 extra={"warmup": False, "grace_s": 2.0, "stall_s": 5.0}))
    pids: list[int] = []

    async def body(pilot: Any) -> None:
        screen = await start_ranks(pilot, app, "train.py --mode loader", 4)
        try:
            await check(pilot, screen)
        finally:  # the ranks hang for good: a failed assertion must not leave them to the teardown
            if screen.launcher is not None and screen.summary is None:
                await screen.stop_run()

    async def check(pilot: Any, screen: Any) -> None:
        await until(pilot, lambda: screen.launcher.pids() and len(screen.launcher.pids()) == 4, what="4 pids")
        pids.extend(screen.launcher.pids().values())
        await until(pilot, lambda: screen.stall_text, what="the stall verdict", timeout=180)
        shown = plain(screen.query_one("#launch-stall"))
        assert shown.startswith("stalled 5s: rank 1 diverged (DataLoader)"), shown
        assert "ranks 0, 2, 3 wait in all_reduce" in shown and "rank 1 is in DataLoader.__next__" in shown
        assert "ranks 0, 2, 3 (stuck): all_reduce at train.py:" in shown     # the grouped stacks
        assert "hang.json" in shown
        await pilot.press("k")
        await until(pilot, lambda: screen.stall_text.startswith("sampled now"), what="the sample on request")
        assert screen.stall_text.startswith("sampled now: rank 1 diverged (DataLoader)")
        await pilot.press("s")
        await until(pilot, lambda: screen.summary is not None, what="the stop")

    run_app(app, body)
    assert len(pids) == 4
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
