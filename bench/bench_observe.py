"""The observed reading of each example job: bash running the job scripts in the sandbox, with the
recording shims, records read back (target: under 1 s per job), beside the static reading's time.

    python bench/bench_observe.py              # examples/ and tests/fixtures/{jobs,clean}/
    python bench/bench_observe.py PATH...      # these job folders
    python bench/bench_observe.py --repeat 5

Best of --repeat runs (default 3) per folder: on a shared machine noise only ever adds time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from doctor.case import Case  # noqa: E402
from doctor.jobfolder.discover import load_job  # noqa: E402
from doctor.observe import sandbox  # noqa: E402
from doctor.observe.run import observe  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 1.0


def folders() -> list[Path]:
    out = [p for p in sorted((REPO / "examples").iterdir()) if p.is_dir() and any(p.glob("*.sbatch"))]
    for group in ("jobs", "clean"):
        out += [p for p in sorted((REPO / "tests" / "fixtures" / group).iterdir()) if p.is_dir()]
    return out


def best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="*", type=Path)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    kind = sandbox.kind()
    if kind is None:
        print("no sandbox here (neither bubblewrap nor unshare works): nothing to measure")
        return 1
    print(f"sandbox: {sandbox.NAMES[kind]}; best of {args.repeat}")
    print(f"{'job folder':<44} {'static':>8} {'observed':>9} {'records':>8}")
    worst = 0.0
    for folder in args.paths or folders():
        case = Case(root=folder.resolve(), options={"observe": False})
        job = load_job(case)
        static = best(lambda c=case: load_job(c), args.repeat)
        reading = observe(case, job)
        seen = best(lambda c=case, j=job: observe(c, j), args.repeat)
        worst = max(worst, seen)
        name = str(folder.resolve().relative_to(REPO)) if folder.resolve().is_relative_to(REPO) else str(folder)
        print(f"{name:<44} {static:7.3f}s {seen:8.3f}s {len(reading.records):8d}")
    print(f"slowest observed reading: {worst:.3f} s (target under {TARGET_S:g} s): "
          f"{'met' if worst < TARGET_S else 'NOT met'}")
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
