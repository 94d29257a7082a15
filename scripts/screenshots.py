"""Regenerate docs/*.svg: one screenshot of each screen of the app, then check what each shows.

Runs the real app headless (Textual's Pilot and `save_screenshot`) on a copy of
examples/scorep-ddp-broken at a fixed path, on the fake 4-GPU node of tests/fakes when gcc
is there (its NVML also feeds the launch screen's sparklines; else this host as it is), a
real 2-rank CPU run for the launch screen, and examples/scorep-ddp-trace (a real Score-P
measurement) for the timeline. Each shot waits for what it must show, and the script fails
when an SVG lacks the words docs/README.md says it shows.

    python scripts/screenshots.py [--out docs]
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from textual.widgets import Input  # noqa: E402
from tui_pilot import click, confirm_apply, focus_on, open_screen, palette, screen_up, until  # noqa: E402

from doctor.case import Case  # noqa: E402
from doctor.tui.app import DoctorApp, Options, make_app  # noqa: E402

SIZE = (150, 42)
# A fixed place, so the paths on the screen read like a job folder and stay the same between runs.
WORK = Path(tempfile.gettempdir()) / "gpu-doctor-docs"
JOB = WORK / "scorep-ddp-broken"
REEXEC = "GPU_DOCTOR_SCREENSHOTS_NODE"

DDP = """\
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(1, 51):
    t = torch.ones(4) * rank
    dist.all_reduce(t)
    print(f"{{'loss': {2.0 / step:.4f}, 'epoch': {step / 50:.2f}}}  step {step}/50", flush=True)
dist.barrier()
dist.destroy_process_group()
"""


@dataclass(frozen=True)
class Shot:
    name: str
    shows: tuple[str, ...]  # words the image must contain (what docs/README.md says it shows)


SHOTS = (
    Shot("overview", ("NOT READY", "SCP002", "LNC001", "ART004", "Fix", "Quit")),
    Shot("finding", ("SCP002", "Evidence", "job.sbatch:27", "How gpu-doctor read your launch", "Remedies")),
    Shot("fix", ("remedies selected to apply", "cuda-warmup", "per-rank-launch", "+++ b/job.sbatch")),
    Shot("applied", ("verified", "u undoes")),
    Shot("launch", ("done", "step 50/50", "exit 0", "GPU0", "Score-P flags", "logs and the run's record")),
    Shot("report", ("Export a redacted report", "gpu-doctor-report.html", "Write")),
    Shot("help", ("Keys: the overview", "Export report", "ctrl+p")),
    Shot("timeline", ("gpu-doctor timeline", "exposed")),
)


def node_env() -> dict[str, str]:
    """The fake healthy 4-GPU node's environment (its libraries on LD_LIBRARY_PATH), else this host's."""
    try:
        from fakes.node import scenario_env

        return scenario_env("healthy", WORK / "node")
    except Exception as exc:  # no gcc: the screenshots show this host as it is
        print(f"(fake node unavailable: {exc})", file=sys.stderr)
        return dict(os.environ)


def svg_text(path: Path) -> str:
    """The words in a Textual SVG screenshot (its text elements, spaces restored)."""
    words = re.findall(r"<text[^>]*>(.*?)</text>", path.read_text(), flags=re.S)
    return html.unescape(" ".join(words)).replace("\xa0", " ")


async def settle(pilot: Any) -> None:
    """Let the screen lay out what the last change put on it before the shot."""
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()


async def shoot(app: DoctorApp, pilot: Any, out: Path, name: str) -> None:
    await settle(pilot)
    app.save_screenshot(str(out / f"{name}.svg"))


async def overview_finding_fix(app: DoctorApp, pilot: Any, out: Path) -> None:
    from doctor.tui.finding import FindingScreen
    from doctor.tui.fix import FixScreen

    await until(pilot, lambda: app.diagnosis is not None, what="the checks")
    await shoot(app, pilot, out, "overview")
    await pilot.press("enter")  # the cursor rests on the first root cause (else the worst finding)
    await screen_up(pilot, app, FindingScreen)
    await shoot(app, pilot, out, "finding")
    await pilot.press("escape")
    await until(pilot, lambda: not isinstance(app.screen, FindingScreen), what="the overview")
    fix = await open_screen(pilot, app, "f", FixScreen)
    await until(pilot, lambda: fix.plan is not None, what="the plan")
    await shoot(app, pilot, out, "fix")
    first = fix.plan
    await confirm_apply(pilot, app)
    await until(pilot, lambda: fix.plan is not first and not app.workers, what="the apply and the new plan")
    await shoot(app, pilot, out, "applied")
    applied = fix.plan
    await pilot.press("u")  # the job folder as it was, for the shots that follow
    await until(pilot, lambda: fix.plan is not applied and not app.workers, what="the undo and its plan")
    before = app.run_result
    await pilot.press("escape")
    await until(pilot, lambda: app.run_result is not before and app.diagnosis is not None, what="the re-run")


async def launch(app: DoctorApp, pilot: Any, out: Path) -> None:
    from doctor.tui.launch import LaunchScreen

    screen = await open_screen(pilot, app, "l", LaunchScreen)
    screen.query_one("#command", Input).value = "ddp_cpu.py"
    screen.query_one("#nproc", Input).value = "2"
    await click(pilot, screen.query_one("#start"))
    await until(pilot, lambda: screen.summary is not None, what="the run")
    await until(pilot, lambda: bool(screen.query("#gpu-0-util")) or screen.gpu_monitor.snapshot()[1],
                what="the GPU lines")
    await shoot(app, pilot, out, "launch")
    await pilot.press("escape")
    await until(pilot, lambda: not isinstance(app.screen, LaunchScreen), what="the overview")


async def report_and_help(app: DoctorApp, pilot: Any, out: Path) -> None:
    from doctor.tui.help import HelpScreen
    from doctor.tui.report import ReportScreen

    dialog = await open_screen(pilot, app, "e", ReportScreen)
    await focus_on(pilot, app, dialog.query_one("#report-path"))
    await shoot(app, pilot, out, "report")
    await pilot.press("escape")
    await until(pilot, lambda: not isinstance(app.screen, ReportScreen), what="the dialog to close")
    await pilot.press("question_mark")
    await screen_up(pilot, app, HelpScreen)
    await shoot(app, pilot, out, "help")
    await pilot.press("escape")


async def timeline(out: Path) -> None:
    """The palette's timeline on the bundled real Score-P measurement."""
    from doctor.tui.timeline import TimelineScreen

    app = make_app(Case(root=WORK / "scorep-ddp-trace", env=dict(os.environ)),
                   Options(playbook="post-run", budget_s=60))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_result is not None, what="the checks")
        await palette(pilot, app, "timeline")
        screen = await screen_up(pilot, app, TimelineScreen)
        await until(pilot, lambda: screen.text is not None, what="the breakdown")
        await shoot(app, pilot, out, "timeline")


async def shoot_all(out: Path, env: dict[str, str]) -> None:
    app = make_app(Case(root=JOB, env=env), Options(budget_s=60, extra={"warmup": False}))
    async with app.run_test(size=SIZE) as pilot:
        await overview_finding_fix(app, pilot, out)
        await launch(app, pilot, out)
        await report_and_help(app, pilot, out)
    await timeline(out)


def check(out: Path) -> list[str]:
    """Each image against what it must show: the missing words, one line per image."""
    problems = []
    for shot in SHOTS:
        path = out / f"{shot.name}.svg"
        text = svg_text(path) if path.exists() else ""
        missing = [w for w in shot.shows if w not in text]
        if missing:
            problems.append(f"{path}: does not show {', '.join(map(repr, missing))}")
    return problems


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=REPO / "docs")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    saved = WORK / "node-env.json"
    if os.environ.get(REEXEC) != str(saved):
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir(parents=True)
        env = node_env()
        saved.write_text(json.dumps(env))
        # The app's own NVML (the launch screen's sparklines) is loaded in this process: start it
        # again with the fake node's libraries on its LD_LIBRARY_PATH.
        os.execve(sys.executable, [sys.executable, *sys.argv],
                  {**os.environ, **{k: v for k, v in env.items() if k.startswith(("LD_", "FAKE_"))},
                   REEXEC: str(saved)})
    env = json.loads(saved.read_text())
    shutil.copytree(REPO / "examples" / "scorep-ddp-broken", JOB)
    shutil.copytree(REPO / "examples" / "scorep-ddp-trace", WORK / "scorep-ddp-trace")
    (JOB / "ddp_cpu.py").write_text(DDP)
    asyncio.run(shoot_all(args.out, env))
    shutil.rmtree(WORK, ignore_errors=True)
    for name in sorted(args.out.glob("*.svg")):
        print(name.relative_to(REPO) if name.is_relative_to(REPO) else name)
    problems = check(args.out)
    for line in problems:
        print(f"screenshots: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
