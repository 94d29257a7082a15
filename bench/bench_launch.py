"""Launch overhead: `gpu-doctor launch` against the field guide's plain bash background loop.

Both run the same 2-rank CPU gloo DDP job; runs alternate (bash, gpu-doctor,
bash, ...) so load changes hit both alike. Prints the wall time of every run,
the medians, and the median of the per-pair ratios. Target: <= 1.10x.

    /work/venv/bin/python bench/bench_launch.py --runs 7 [--warmup]

--warmup compares the whole recipe: the seed's warm-up (`python -c "import
torch; torch.zeros(1).cuda()"` in try/except) before the loop, against
`gpu-doctor launch` with its warm-up on.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = r'''
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 51):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    loss.backward(); opt.step(); opt.zero_grad()
    print(f"step {step}/50 loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
os._exit(0)   # torch 2.13's gloo teardown can abort at exit; keep the timing about launching
'''

WARMUP = ('for attempt in 1 2 3; do "$PY" -c "import torch, sys\ntry:\n    torch.zeros(1).cuda()\n'
          'except Exception:\n    sys.exit(1)" 2>/dev/null && break; done\n')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bash_loop(python: str, workdir: Path, warmup: bool, sessions: bool = False) -> list[str]:
    port = free_port()
    setsid = "setsid --wait " if sessions else ""
    loop = (f'for r in 0 1; do RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 '
            f'MASTER_PORT={port} {setsid}"$PY" job.py > rank_$r.log 2>&1 & done; wait')
    return ["bash", "-c", (WARMUP if warmup else "") + loop]


def gpu_doctor(python: str, warmup: bool) -> list[str]:
    return [python, "-m", "doctor", "launch", "--plain", "--quiet", "--nproc", "2",
            *([] if warmup else ["--no-warmup"]), "--", "job.py"]


def cpu_seconds() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def timed(argv: list[str], workdir: Path, env: dict[str, str]) -> tuple[float, float] | None:
    """(wall seconds, CPU seconds of the command and everything it waited for)."""
    cpu0, start = cpu_seconds(), time.perf_counter()
    done = subprocess.run(argv, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, check=False)
    took, cpu = time.perf_counter() - start, cpu_seconds() - cpu0
    if done.returncode != 0:
        print(f"  run failed ({done.returncode}): {done.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return took, cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=7, help="pairs of runs (at least 5)")
    p.add_argument("--warmup", action="store_true", help="include the CUDA warm-up on both sides")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--sessions", action="store_true",
                   help="run each bash-loop rank in its own session (setsid), as gpu-doctor does: with "
                        "sched_autogroup on a loaded machine a session gets its own CPU share")
    args = p.parse_args()
    repo = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PY=args.python,
               PYTHONPATH=os.pathsep.join(x for x in (str(repo), os.environ.get("PYTHONPATH")) if x))
    bash_times: list[float] = []
    doctor_times: list[float] = []
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    cpu_extra: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp:
        workdir = Path(tmp)
        (workdir / "job.py").write_text(JOB)
        timed(bash_loop(args.python, workdir, False), workdir, env)   # warm the page cache once
        for i in range(max(5, args.runs)):
            b = timed(bash_loop(args.python, workdir, args.warmup, args.sessions), workdir, env)
            d = timed(gpu_doctor(args.python, args.warmup), workdir, env)
            if not (b and d):
                continue
            print(f"run {i + 1}: bash loop {b[0]:.2f} s ({b[1]:.2f} s CPU), "
                  f"gpu-doctor launch {d[0]:.2f} s ({d[1]:.2f} s CPU)")
            bash_times.append(b[0])
            doctor_times.append(d[0])
            ratios.append(d[0] / b[0])
            cpu_ratios.append(d[1] / b[1])
            cpu_extra.append(d[1] - b[1])
    if len(ratios) < 5:
        print("fewer than 5 good pairs; no verdict", file=sys.stderr)
        return 1
    mb, md, mr = statistics.median(bash_times), statistics.median(doctor_times), statistics.median(ratios)
    what = ("with warm-up" if args.warmup else "no warm-up") + (", bash ranks setsid" if args.sessions else "")
    print(f"2-rank gloo DDP job, {what}, {len(ratios)} pairs on {os.cpu_count()} CPUs:")
    print(f"  median bash loop        {mb:.2f} s")
    print(f"  median gpu-doctor launch {md:.2f} s")
    print(f"  median per-pair ratio   {mr:.3f}x (ratio of medians {md / mb:.3f}x; target <= 1.10x)")
    print(f"  CPU time: median per-pair ratio {statistics.median(cpu_ratios):.3f}x, "
          f"median extra {statistics.median(cpu_extra):+.2f} s per launch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
