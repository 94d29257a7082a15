"""How fast is `gpu-doctor fleet`? A generated verdict history read end to end, beside the floors.

    python bench/bench_fleet.py [--verdicts 7680 100000] [--json]

Writes each history once (real gate documents from the fake node, stamped per node and run:
tests/fleet_util.py; 64 nodes, four runs a day, as many days as the count needs), then times,
alternately so machine load hits all alike: `gpu-doctor fleet DIR --json --no-sinfo` (the whole
command, start-up included), the I/O floor (`cat` of every file) and the parse floor (a bare
`json.load` of every file in one Python process). Target: 7,680 verdicts under 5 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import fleet_util  # noqa: E402

PARSE_FLOOR = ("import json, os, sys\n"
               "for e in os.scandir(sys.argv[1]):\n"
               "    with open(e.path, 'rb') as fh: json.load(fh)\n")


def wall(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def bench(n: int, t: fleet_util.Templates, work: Path, runs: int) -> dict[str, float]:
    folder = work / f"v{n}"
    days = -(-n // (64 * 4))
    fleet_util.history(folder, t, nodes=64, days=days)
    files = sorted(str(p) for p in folder.iterdir())
    commands = {
        "fleet": [sys.executable, "-m", "doctor", "fleet", str(folder), "--json", "--no-sinfo"],
        "cat": ["sh", "-c", f"find {folder} -type f -exec cat {{}} + >/dev/null"],
        "json.load": [sys.executable, "-c", PARSE_FLOOR, str(folder)],
    }
    times: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            times[name].append(wall(argv))
    read = json.loads(subprocess.run(commands["fleet"], check=True, capture_output=True, text=True).stdout)["read"]
    shutil.rmtree(folder)
    return {"files": len(files), "verdicts": read["verdicts"], **{k: statistics.median(v) for k, v in times.items()}}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--verdicts", type=int, nargs="+", default=[7680, 100000])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        t = fleet_util.templates(work / "templates")
        rows = [bench(n, t, work, args.runs) for n in args.verdicts]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'files':>7} {'verdicts':>9} {'fleet s':>8} {'cat s':>7} {'json.load s':>12} {'fleet/json.load':>16}")
    for r in rows:
        print(f"{r['files']:>7} {r['verdicts']:>9} {r['fleet']:>8.2f} {r['cat']:>7.2f} {r['json.load']:>12.2f} "
              f"{r['fleet'] / r['json.load']:>15.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
