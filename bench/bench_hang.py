"""The stall watch on real gloo ranks: is the verdict right every time, how soon, and what does
`--stall` cost a healthy run?

    .venv/bin/python bench/bench_hang.py verdicts --runs 20     # 4 ranks, rank 1 skips the all_reduce
                                                                # of step 50 (even runs) or sleeps in its
                                                                # data loader (odd runs); --stall 15
    .venv/bin/python bench/bench_hang.py overhead --runs 5      # healthy 4-rank job, --stall 0 vs 300

`verdicts` prints per run: right or wrong (rank 1 named, ranks 0, 2, 3 in all_reduce), seconds from
the stall (the ranks' last output) to hang.json, and whether any rank or py-spy outlived the run.
`overhead` alternates the two settings run by run and prints the medians and the per-pair ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "tests" / "hang_jobs" / "train.py"


def launch(work: Path, stall: float, *job_args: str) -> tuple[int, Path, float]:
    run = work / f"run-{time.monotonic_ns()}"
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "doctor", "launch", "--nproc", "4", "--no-warmup", "--plain", "-q",
                           "--stall", str(stall), "--stall-action", "stop", "--run-dir", str(run), "--",
                           "train.py", *job_args], cwd=work, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return done.returncode, run, time.monotonic() - t0


def left_running(run: Path) -> list[int]:
    pids = json.loads((run / "pids.json").read_text())["ranks"].values()
    return [p for p in pids if Path(f"/proc/{p}").exists()
            and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]


def verdicts(work: Path, runs: int) -> int:
    wrong = 0
    delays = []
    for i in range(runs):
        mode = "skip" if i % 2 == 0 else "loader"
        code, run, wall = launch(work, 15, "--mode", mode)
        try:
            doc = json.loads((run / "hang.json").read_text())
        except OSError:
            doc = {"diverged_ranks": None, "verdict": "(no hang.json)"}
        onset = max((run / f"rank_{r}.log").stat().st_mtime for r in range(4))
        delay = (run / "hang.json").stat().st_mtime - onset if (run / "hang.json").exists() else float("inf")
        ok = (code == 3 and doc["diverged_ranks"] == [1] and doc["verdict"].startswith("ranks 0, 2, 3 wait in all_reduce")
              and delay < 45 and not left_running(run))
        wrong += not ok
        delays.append(delay)
        print(f"run {i + 1:2d} {mode:6s} {'right' if ok else 'WRONG'}  stall->verdict {delay:5.1f} s  "
              f"wall {wall:5.1f} s  exit {code}  left {left_running(run)}  {doc['verdict'][:110]}", flush=True)
    print(f"{runs - wrong} of {runs} right; stall->verdict median {statistics.median(delays):.1f} s, "
          f"max {max(delays):.1f} s")
    return 1 if wrong else 0


def overhead(work: Path, runs: int) -> int:
    walls: dict[float, list[float]] = {0: [], 300: []}
    for i in range(runs):
        for stall in ((0, 300) if i % 2 == 0 else (300, 0)):
            code, _, wall = launch(work, stall, "--mode", "healthy", "--steps", "300")
            walls[stall].append(wall)
            print(f"run {i + 1} --stall {stall:3g}: {wall:5.2f} s (exit {code})", flush=True)
    ratios = [b / a for a, b in zip(walls[0], walls[300], strict=True)]
    print(f"median --stall 0: {statistics.median(walls[0]):.2f} s; --stall 300: {statistics.median(walls[300]):.2f} s; "
          f"median ratio {statistics.median(ratios):.3f} (spread of --stall 0 runs: "
          f"{min(walls[0]):.2f}-{max(walls[0]):.2f} s)")
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=("verdicts", "overhead"))
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-hang-"))
    try:
        shutil.copy(JOB, work / "train.py")
        return verdicts(work, args.runs) if args.what == "verdicts" else overhead(work, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
