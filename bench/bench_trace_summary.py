"""Trace summary time does not grow with the number of events (definitions only).

    python bench/bench_trace_summary.py                 # 100k and 5M events
    python bench/bench_trace_summary.py --events 100000 1000000 --repeat 5

Writes real OTF2 archives with the `otf2` writer (tests/tracegen.py: one rank, two
CPU threads, two CUDA streams, NCCL kernels), then times the `experiments` reader
on each (child process included), median of --repeat runs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import tracegen as tg  # noqa: E402

from doctor.artifacts.summary import read_summaries  # noqa: E402


def size_of(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, nargs="+", default=[100_000, 5_000_000])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-trace-"))
    proc = tg.Process(threads=2, gpu_streams=("CUDA[0:7]", "CUDA[0:20]"), cuda=True)
    results: list[float] = []
    try:
        for n in args.events:
            folder = tmp / f"scorep_rank_{len(results)}"
            t0 = time.perf_counter()
            tg.experiment(folder, tg.Scenario([proc], tg.CUDA_CFG, events=n))
            written = time.perf_counter() - t0
            read_summaries([("trace", str(folder / "traces.otf2"))], timeout=120)  # warm-up
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                [summary] = read_summaries([("trace", str(folder / "traces.otf2"))], timeout=120)
                times.append(time.perf_counter() - t0)
            assert summary.ok and summary.events == n, summary
            med = statistics.median(times)
            results.append(med)
            print(f"{n:>10,} events  {size_of(folder) / 2**20:8.1f} MiB on disk  (written in {written:5.1f} s)"
                  f"  summary: median {med * 1000:6.1f} ms  (min {min(times) * 1000:.1f}, "
                  f"max {max(times) * 1000:.1f}; {len(summary.locations)} locations, "
                  f"{len(summary.cuda_locations)} CUDA)")
        if len(results) > 1:
            print(f"ratio largest/smallest: {results[-1] / results[0]:.2f} (1.0 = same within noise)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
