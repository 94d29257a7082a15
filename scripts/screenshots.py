"""Regenerate docs/*.svg: one screenshot of each screen of the app.

Runs the app headless (Textual's Pilot) on a copy of examples/scorep-ddp-broken, with
the fake 4-GPU node from tests/fakes when gcc is there (else this host as it is), and
a real 2-rank CPU run for the launch screen.

    python scripts/screenshots.py [--out docs]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from textual.widgets import DataTable, Input  # noqa: E402

from doctor.case import Case  # noqa: E402
from doctor.tui.app import Options, make_app  # noqa: E402

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


def node_env(tmp: Path) -> dict[str, str]:
    try:
        from fakes.node import scenario_env

        return scenario_env("healthy", tmp)
    except Exception as exc:  # no gcc: the screenshots show this host as it is
        print(f"(fake node unavailable: {exc})", file=sys.stderr)
        return dict(os.environ)


async def wait(pilot: Any, cond: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("screen did not settle")
        await pilot.pause(0.05)


async def shoot(out: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="gpu-doctor-shots-"))
    job = tmp / "scorep-ddp-broken"
    shutil.copytree(REPO / "examples" / "scorep-ddp-broken", job)
    (job / "ddp_cpu.py").write_text(DDP)
    env = node_env(tmp)
    app = make_app(Case(root=job, env=env), Options(budget_s=60, extra={"warmup": False}))
    async with app.run_test(size=(150, 42)) as pilot:
        await wait(pilot, lambda: app.run_result is not None)
        await pilot.pause(0.2)
        app.save_screenshot(str(out / "overview.svg"))
        table = app.query_one("#checks", DataTable)
        table.move_cursor(row=table.get_row_index("LNC001"))
        await pilot.press("enter")
        await pilot.pause(0.3)
        app.save_screenshot(str(out / "finding.svg"))
        await pilot.press("escape")
        await pilot.press("f")
        await wait(pilot, lambda: getattr(app.screen, "plan", None) is not None)
        await pilot.pause(0.3)
        app.save_screenshot(str(out / "fix.svg"))
        await pilot.press("escape")
        await pilot.press("l")
        await pilot.pause(0.2)
        screen = app.screen
        screen.query_one("#command", Input).value = "ddp_cpu.py"
        screen.query_one("#nproc", Input).value = "2"
        await pilot.click("#start")
        await wait(pilot, lambda: getattr(screen, "summary", None) is not None)
        await pilot.pause(0.3)
        app.save_screenshot(str(out / "launch.svg"))
        await pilot.press("escape")
        await pilot.press("e")
        await pilot.pause(0.3)
        app.save_screenshot(str(out / "report.svg"))
    shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=REPO / "docs")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    asyncio.run(shoot(args.out))
    for name in sorted(args.out.glob("*.svg")):
        print(name.relative_to(REPO) if name.is_relative_to(REPO) else name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
