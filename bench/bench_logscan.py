"""Log scan throughput against `grep -c -E` with the same patterns, on the same generated file.

    python bench/bench_logscan.py              # 1 GiB log
    python bench/bench_logscan.py --size-mb 64 # smaller
    python bench/bench_logscan.py --engine stdlib   # force the bytes.find pre-filter (no RE2)

Both run on the same file in the same invocation, interleaved --repeat times (default 3;
the file is read once beforehand so both start from the page cache); the best time of
each is kept, since on a shared machine noise only ever adds time. Prints both
throughputs and the ratio (target: gpu-doctor >= 0.5x grep).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from doctor.artifacts import logscan  # noqa: E402

SIGNATURE_LINES = [
    "[rank3]: [Score-P] Warning: [CUPTI Activity] Dropped 85222 records. Current buffer size: 1048576 bytes",
    "Proposed minimum SCOREP_CUDA_BUFFER=8889000",
    "[Score-P] Warning: Too many memory requested. Score-P supports only up to,",
    "[Score-P] ERROR: Unknown option: '--'",
    "  what():  Should never been called   (dummyHasPrimaryContext)",
    "UserWarning: CUDA initialization: Error 802: system not yet initialized",
    "[Score-P] Error: File does already exist: scorep-20240501_1200_1",
]


def generate(path: Path, size: int, seed: int = 1) -> None:
    """Training-log-like lines (HF Trainer dicts, tqdm bars, NCCL info), a few signatures."""
    rnd = random.Random(seed)
    lines = []
    for i in range(20000):
        kind = i % 10
        if kind < 6:
            lines.append(f"{{'loss': {rnd.random():.4f}, 'grad_norm': {rnd.random() * 10:.3f}, "
                         f"'learning_rate': {rnd.random():.3e}, 'epoch': {i / 1000:.2f}}}")
        elif kind < 8:
            lines.append(f"\r{i % 100:3d}%|{'#' * (i % 40):<40}| {i}/20000 [00:{i % 60:02d}<01:00, "
                         f"{rnd.random() * 20:.2f}it/s]")
        else:
            lines.append(f"[rank{i % 8}]:node07:{1000 + i}:{2000 + i} [0] NCCL INFO Channel {i % 32:02d}/0 : "
                         f"{i % 8}[{i % 8}] -> {(i + 1) % 8}[{(i + 1) % 8}] via P2P/CUMEM/read")
    block = ("\n".join(lines) + "\n").encode()
    with open(path, "wb") as fh:
        written, n = 0, 0
        while written < size:
            fh.write(block)
            written += len(block)
            n += 1
            if n % 4 == 0:  # a few signatures spread over the file
                line = SIGNATURE_LINES[(n // 4) % len(SIGNATURE_LINES)] + "\n"
                fh.write(line.encode())
                written += len(line)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mb", type=int, default=1024, help="log size in MiB (default 1024)")
    p.add_argument("--engine", choices=("default", "stdlib"), default="default")
    p.add_argument("--dir", help="where to write the log (default: a temp folder, removed after)")
    p.add_argument("--repeat", type=int, default=3, help="interleaved runs of each (default 3)")
    args = p.parse_args()
    if shutil.which("grep") is None:
        print("grep is not installed", file=sys.stderr)
        return 2
    finder = logscan._Finder()
    if args.engine == "stdlib":
        finder.re2 = None
    logscan._FINDER = finder
    tmp = Path(args.dir or tempfile.mkdtemp(prefix="bench-logscan-"))
    path = tmp / "train.log"
    try:
        t0 = time.perf_counter()
        generate(path, args.size_mb << 20)
        size = path.stat().st_size
        print(f"generated {size / 2**20:.0f} MiB in {time.perf_counter() - t0:.1f} s: {path}")
        with open(path, "rb") as fh:  # warm the page cache for both
            while fh.read(64 << 20):
                pass
        cmd = ["grep", "-c", "-E"] + [x for pat in logscan.grep_patterns() for x in ("-e", pat)] + [str(path)]
        t_grep = t_ours = float("inf")
        for _ in range(max(1, args.repeat)):
            t0 = time.perf_counter()
            grep = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
            t_grep = min(t_grep, time.perf_counter() - t0)
            t0 = time.perf_counter()
            matches = logscan.scan_file(path)
            t_ours = min(t_ours, time.perf_counter() - t0)
        print(f"grep -c -E : {t_grep:6.2f} s  {size / t_grep / 1e6:7.0f} MB/s  ({grep.stdout.strip()} lines)")
        print(f"gpu-doctor : {t_ours:6.2f} s  {size / t_ours / 1e6:7.0f} MB/s  ({len(matches)} matches kept, "
              f"engine {finder.engine})")
        print(f"ratio: gpu-doctor runs at {t_grep / t_ours:.2f}x grep's speed (target >= 0.5x; "
              f"best of {max(1, args.repeat)}, load average {os.getloadavg()[0]:.1f})")
    finally:
        if args.dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
