"""The replica canary's cost and its false alarms, on real CPU gloo DDP ranks.

    .venv/bin/python bench/bench_canary.py clean    [--steps 10000 --nproc 4 --k 10]
    .venv/bin/python bench/bench_canary.py overhead [--rounds 5 --steps 300 --nproc 2]

`clean`: one run of --steps steps with `--canary K` on the MLP of tests/fixtures/canary: the
canary must not raise an alarm (exit 0, canary.json verdict "clean", every check agreed).
Prints the checks and the cost from canary.json.

`overhead`: a small real model (a 2-layer transformer encoder, width 128, ~0.4 M parameters)
side by side: each round runs the job without the canary, with --canary 10 and with
--canary 100, in a rotating order so load changes hit all three alike. The job times its own
steps after 10 warm-up steps, by the wall clock and by its process's CPU time (every thread
of the rank, the canary's too: on a shared machine the steadier of the two); the overhead is
each run's mean step time over the same round's run without the canary. Within each run the job also times every step, and the median
of the check steps (multiples of K) over the median of the others, spread over K steps, is a
side-by-side at the finest interleave (without the canary, multiples of 10: the noise floor).
Prints every run, the per-mode medians, the noise (the spread
of the runs without the canary around their median) and canary.json's own measure (the digest
time per check over K steps). Targets: K=10 at most 2 %, K=100 within the noise.
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "tests" / "fixtures" / "canary" / "ddp_train.py"


def launch(folder: Path, name: str, nproc: int, k: int,
           job_args: list[str]) -> tuple[int, dict, list[tuple[float, float]], str]:
    """(exit code, canary.json or {}, each rank's mean step (wall ms, CPU ms), stderr) of one launch."""
    run = folder / name
    canary = ["--canary", str(k)] if k else []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    res = subprocess.run([sys.executable, "-m", "doctor", "launch", "--plain", "--no-warmup", "--nproc", str(nproc),
                          "--run-dir", str(run), *canary, "--", "ddp_train.py", *job_args, "--os-exit"],
                         cwd=folder, env=env, capture_output=True, text=True, timeout=3600)
    steps = [(float(line.split("step_ms_mean ")[1].split()[0]), float(line.split("step_cpu_ms_mean ")[1].split()[0]))
             for line in res.stdout.splitlines() if "step_cpu_ms_mean " in line]
    doc_timing = [(float(line.split("check_steps_ms ")[1].split()[0]), float(line.split("other_steps_ms ")[1].split()[0]))
                  for line in res.stdout.splitlines() if "check_steps_ms " in line]
    doc = json.loads((run / "canary.json").read_text()) if (run / "canary.json").is_file() else {}
    doc["_timing"] = doc_timing
    return res.returncode, doc, steps, res.stderr


def clean(args: argparse.Namespace, folder: Path) -> int:
    code, doc, steps, err = launch(folder, "clean", args.nproc, args.k,
                                   ["--steps", str(args.steps), "--print-every", str(args.steps)])
    agreed = {r: v["agreed"] for r, v in doc.get("ranks", {}).items()}
    print(f"{args.steps} steps, {args.nproc} ranks, --canary {args.k}: exit {code}, verdict {doc.get('verdict')}, "
          f"{doc.get('checks')} checks, agreed per rank {agreed}, alarms {len(doc.get('mismatches', []))}, "
          f"missed {len(doc.get('missed', []))}")
    print(f"step time {statistics.mean(w for w, _ in steps):.3f} ms (job's own), cost {json.dumps(doc.get('cost'))}")
    ok = code == 0 and doc.get("verdict") == "clean" and all(a == doc["checks"] for a in agreed.values())
    if not ok:
        print(err[-3000:])
    return 0 if ok else 1


def overhead(args: argparse.Namespace, folder: Path) -> int:
    modes = (0, 10, 100)
    interleaved: dict[int, list[float]] = {m: [] for m in modes}
    runs: dict[str, dict[int, list[float]]] = {"wall": {m: [] for m in modes}, "cpu": {m: [] for m in modes}}
    ratios: dict[str, dict[int, list[float]]] = {"wall": {m: [] for m in modes}, "cpu": {m: [] for m in modes}}
    own: dict[int, list[float]] = {m: [] for m in modes}
    for r in range(args.rounds):
        order = modes[r % 3:] + modes[:r % 3]
        got: dict[str, dict[int, float]] = {"wall": {}, "cpu": {}}
        for k in order:
            job = ["--model", "transformer", "--width", "128", "--steps", str(args.steps), "--print-every",
                   str(args.steps), "--timing-k", str(k or 10)]
            code, doc, steps, err = launch(folder, f"r{r}-k{k}", args.nproc, k, job)
            if code != 0 or not steps:
                print(f"round {r} K={k}: exit {code}\n{err[-2000:]}")
                return 1
            got["wall"][k] = statistics.mean(w for w, _ in steps)
            got["cpu"][k] = statistics.mean(c for _, c in steps)
            for what in got:
                runs[what][k].append(got[what][k])
            if k:
                own[k].append(doc["cost"]["overhead_pct"])
            # within the run: the check steps' median time over the other steps', spread over K steps
            interleaved[k] += [100.0 * (c / o - 1.0) / (k or 10) for c, o in doc["_timing"]]
            print(f"round {r} K={k or 'off':>4}: {got['wall'][k]:.3f} ms a step, {got['cpu'][k]:.3f} CPU ms a step"
                  + (f"  (canary.json: digest {doc['cost']['digest_ms_mean']:.3f} ms per check, "
                     f"{doc['cost']['overhead_pct']:.3f} % of step time)" if k else ""), flush=True)
        for what in got:
            for k in modes:
                ratios[what][k].append(100.0 * (got[what][k] / got[what][0] - 1.0))
    for what, unit in (("wall", "ms"), ("cpu", "CPU ms")):
        base = statistics.median(runs[what][0])
        noise = 100.0 * max(abs(v - base) for v in runs[what][0]) / base
        print(f"\n{what}: median step: off {base:.3f} {unit}, K=10 {statistics.median(runs[what][10]):.3f}, "
              f"K=100 {statistics.median(runs[what][100]):.3f}; noise (runs without the canary, largest "
              f"distance from their median) {noise:.2f} %")
        for k in (10, 100):
            print(f"  K={k}: median per-round overhead {statistics.median(ratios[what][k]):+.2f} % "
                  f"(rounds: {', '.join(f'{v:+.2f}' for v in ratios[what][k])})")
    for k in modes:
        print(f"within each run, K={k or 'off (steps that are multiples of 10)'}: the check steps' extra time "
              f"spread over K steps, median {statistics.median(interleaved[k]):+.3f} % "
              f"(per rank and run: {min(interleaved[k]):+.3f} .. {max(interleaved[k]):+.3f})")
    for k in (10, 100):
        print(f"canary.json's own measure at K={k}: digest time per check over K steps, median "
              f"{statistics.median(own[k]):.3f} %")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("clean", "overhead"))
    p.add_argument("--steps", type=int)
    p.add_argument("--nproc", type=int)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-canary-"))
    shutil.copy(JOB, folder / "ddp_train.py")
    try:
        if args.what == "clean":
            args.steps, args.nproc = args.steps or 10000, args.nproc or 4
            return clean(args, folder)
        args.steps, args.nproc = args.steps or 300, args.nproc or 2
        return overhead(args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
