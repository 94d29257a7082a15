"""The launch screen with the canary on: the alarm line while the ranks run, and in the verdict."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")
pytest.importorskip("torch")

from textual.widgets import Input, Static  # noqa: E402
from tui_pilot import CEILING_S, click, open_screen, plain, run_app, until  # noqa: E402

from doctor.case import Case  # noqa: E402
from doctor.tui.app import Options, make_app  # noqa: E402
from doctor.tui.launch import LaunchScreen  # noqa: E402

JOB = Path(__file__).resolve().parent / "fixtures" / "canary" / "ddp_train.py"
pytestmark = pytest.mark.slow


def test_launch_screen_names_the_rank_and_the_tensor_that_differ(tmp_path: Path) -> None:
    shutil.copy(JOB, tmp_path / "ddp_train.py")
    app = make_app(Case(root=tmp_path, env=dict(os.environ)),
                   Options(playbook="post-run", budget_s=CEILING_S, extra={"warmup": False, "grace_s": 2.0}))
    line = "step 10: rank 1's `layer2.weight` differs from ranks 0, 2"
    seen_live: list[str] = []

    async def body(pilot: Any) -> None:
        screen: LaunchScreen = await open_screen(pilot, app, "l", LaunchScreen)
        screen.query_one("#command", Input).value = ("ddp_train.py --steps 40 --flip-rank 1 --flip-after 7 "
                                                     "--flip-tensor layer2.weight --os-exit")
        screen.query_one("#nproc", Input).value = "3"
        screen.query_one("#canary", Input).value = "5"
        await click(pilot, screen.query_one("#start"))
        verdict = screen.query_one("#launch-verdict", Static)

        def alarm_shown() -> bool:
            text = plain(verdict)
            if screen.summary is None and line in text:
                seen_live.append(text)
            return screen.summary is not None

        await until(pilot, alarm_shown, what="the run")
        assert seen_live and seen_live[0].startswith(f"canary: {line}")   # while the ranks still ran
        final = plain(verdict)
        assert final.startswith(f"exit 3: replicas differ: {line}")
        assert f"canary: {line}" in final and "P2P002" in final

    run_app(app, body)
