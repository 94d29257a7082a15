"""How fast is the gate? `gpu-doctor --check-only` on the healthy fake node vs a bare `python -c pass`.

    python bench/bench_gate.py [--runs 20] [--json]

Builds the fake NVIDIA libraries (tests/fakes, needs gcc), runs both commands
alternately (so machine load hits both alike) and prints the median, min and
max wall time of each and the ratio of the medians. The gate's targets:
median under 0.5 s and under 10x the bare interpreter.
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

from fakes.node import scenario_env  # noqa: E402


def gate_command() -> list[str]:
    """The installed console script next to this interpreter, else `python -m doctor`."""
    script = Path(sys.executable).parent / "gpu-doctor"
    if script.exists():
        return [str(script)]
    found = shutil.which("gpu-doctor")
    return [found] if found else [sys.executable, "-m", "doctor"]


def wall(argv: list[str], env: dict[str, str], cwd: str, expect: int = 0) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != expect:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stdout}{proc.stderr}")
    return seconds


def summary(samples: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(samples), "min_s": min(samples), "max_s": max(samples)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each command (at least 10)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    runs = max(10, args.runs)
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
        env = scenario_env("healthy", Path(tmp))
        gate = [*gate_command(), "--check-only", "-q"]
        bare = [sys.executable, "-c", "pass"]
        wall(gate, env, tmp)  # warm the page cache and the .pyc files
        wall(bare, env, tmp)
        gate_s, bare_s = [], []
        for _ in range(runs):
            gate_s.append(wall(gate, env, tmp))
            bare_s.append(wall(bare, env, tmp))
    result = {"runs": runs, "command": " ".join(gate), "gate": summary(gate_s), "python_c_pass": summary(bare_s)}
    result["ratio"] = result["gate"]["median_s"] / result["python_c_pass"]["median_s"]
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"runs: {runs} each, alternating; gate: {result['command']} (healthy fake node, 4 GPUs)")
    for name in ("gate", "python_c_pass"):
        s = result[name]
        print(f"  {name:<14} median {s['median_s'] * 1000:7.1f} ms   min {s['min_s'] * 1000:7.1f} ms   "
              f"max {s['max_s'] * 1000:7.1f} ms")
    print(f"  ratio (median gate / median python -c pass): {result['ratio']:.1f}x "
          f"(targets: gate < 500 ms, ratio < 10x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
