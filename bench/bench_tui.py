"""Is the app responsive while the ranks flood it? Key-to-screen latency under load.

Two ranks each print ~10,000 lines per second (plus a `\\r` progress bar) for a few
seconds while the launch screen is open. Every 100 ms the bench presses a key that
moves the rank table's cursor (`app.simulate_key`, as if typed) and times how long until
the table has moved its cursor, i.e. the app's event loop got to it. Prints median, p95 and max
latency, and how many lines the app took in. Target: p95 under 100 ms.

    python bench/bench_tui.py [--seconds 5] [--rate 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from textual.widgets import DataTable, Input

from doctor.case import Case
from doctor.tui.app import Options, make_app
from doctor.tui.launch import LaunchScreen

FLOOD = """\
import os, sys, time
rate = int(os.environ.get("RATE", "10000")); seconds = float(os.environ.get("SECONDS_", "5"))
rank = os.environ.get("RANK", "?")
end = time.monotonic() + seconds
n = 0
while time.monotonic() < end:
    t0 = time.monotonic()
    chunk = "".join(f"rank {rank} line {n + i} " + "x" * 60 + "\\n" for i in range(rate // 100))
    sys.stdout.write(chunk + f"\\r{n}/{int(rate * seconds)} it")
    sys.stdout.flush()
    n += rate // 100
    time.sleep(max(0.0, 0.01 - (time.monotonic() - t0)))
print(f"\\nrank {rank} done after {n} lines")
"""


async def measure(seconds: float, rate: int) -> tuple[list[float], int]:
    folder = Path(tempfile.mkdtemp(prefix="gpu-doctor-bench-tui-"))
    (folder / "flood.py").write_text(FLOOD)
    import os

    env = {**os.environ, "RATE": str(rate), "SECONDS_": str(seconds)}
    app = make_app(Case(root=folder, env=env), Options(playbook="post-run", budget_s=20,
                                                      extra={"warmup": False}))
    latencies: list[float] = []
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("l")
        while not isinstance(app.screen, LaunchScreen):
            await pilot.pause(0.01)
        screen = app.screen
        screen.query_one("#command", Input).value = "flood.py"
        screen.query_one("#nproc", Input).value = "2"
        import dataclasses

        original = screen.build_spec
        screen.build_spec = lambda: dataclasses.replace(original(), env=env)  # type: ignore[method-assign]
        await pilot.click("#start")
        table = screen.query_one("#ranks", DataTable)
        table.focus()
        while screen.summary is None:
            before = table.cursor_row
            key = "down" if before == 0 else "up"
            t0 = time.perf_counter()
            app.simulate_key(key)
            while table.cursor_row == before and time.perf_counter() - t0 < 5:
                await asyncio.sleep(0.001)
            await asyncio.sleep(0)  # the refresh is scheduled on the same loop turn
            latencies.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.1)
        lines = sum(s.lines for s in screen.launcher.statuses())  # type: ignore[union-attr]
    return latencies, lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rate", type=int, default=10_000, help="lines per second per rank")
    args = p.parse_args()
    latencies, lines = asyncio.run(measure(args.seconds, args.rate))
    if not latencies:
        print("no samples", file=sys.stderr)
        return 2
    latencies.sort()
    p95 = latencies[int(0.95 * (len(latencies) - 1))]
    print(f"2 ranks x {args.rate} lines/s for {args.seconds:g} s: app took in {lines} lines")
    print(f"key-to-screen latency over {len(latencies)} presses: median {statistics.median(latencies):.1f} ms, "
          f"p95 {p95:.1f} ms, max {latencies[-1]:.1f} ms (target p95 < 100 ms)")
    return 0 if p95 < 100 else 1


if __name__ == "__main__":
    sys.exit(main())
