"""Memory and time of the gate on one long shell line: `true; true; ...; python train.py`.

    python bench/bench_long_line.py [--kib 200] [--timeout 10] [--json]

Writes a job folder whose script is one line of `--kib` KiB (the shape the hostile-input
campaign used: 90 KiB took 2.7 GB and 4.7 s before the shell reader stayed linear), runs
`gpu-doctor --check-only JOB --timeout S` (its own resource usage, from `wait4`) and prints its wall time, peak memory (max RSS) and exit
code; with `--shapes`, also many commands on several lines and a deep pipeline. The targets:
within `--timeout` (+ 5 s to exit) and memory linear in the input (well under 1 GB at 200 KiB).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def shapes(kib: int) -> dict[str, str]:
    """Script text of about `kib` KiB per shape (each ends in the launch the checks look for)."""
    n = kib * 1024
    return {
        "one line of `true; `": "true; " * (n // 6) + "python train.py\n",
        "many lines of 20 commands": ("true; " * 20 + "\n") * (n // 121) + "python train.py\n",
        "one deep pipeline": "cat" + " | cat" * (n // 6) + " | python train.py\n",
    }


def gate(job: Path, timeout: float) -> dict[str, float | int | str]:
    """Wall time, peak RSS (MiB, of this child alone: wait4) and exit code of one gate run on `job`."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([sys.executable, "-m", "doctor", "--check-only", str(job), "--timeout", str(timeout),
                                 "-q"], cwd=ROOT, stdout=out, stderr=subprocess.DEVNULL, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        verdict = out.read().strip()[:160]
    return {"wall_s": round(wall, 2), "max_rss_mib": round(usage.ru_maxrss / 1024, 1), "rc": proc.returncode,
            "verdict": verdict}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kib", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--shapes", action="store_true", help="also many lines and a deep pipeline")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in list(shapes(args.kib).items())[: None if args.shapes else 1]:
            job = Path(tmp) / f"job{len(results)}"
            job.mkdir()
            (job / "job.sh").write_text("#!/bin/bash\n" + text)
            (job / "train.py").write_text("print('step 1')\n")
            size = os.path.getsize(job / "job.sh")
            results[name] = {"bytes": size, **gate(job, args.timeout)}
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for name, r in results.items():
            print(f"{name:<28} {r['bytes'] / 1024:7.1f} KiB  {r['wall_s']:6.2f} s  {r['max_rss_mib']:8.1f} MiB  "
                  f"exit {r['rc']}  (--timeout {args.timeout:g})")
    late = [n for n, r in results.items() if float(r["wall_s"]) > args.timeout + 5]
    return 1 if late else 0


if __name__ == "__main__":
    sys.exit(main())
