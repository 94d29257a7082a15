"""`gpu-doctor timeline` against the OTF2 C library's own reader, and ranks read side by side.

    python bench/bench_timeline.py [--events 5000000] [--ranks 8] [--rank-events 4000000]
                                   [--jobs 2] [--repeat 1] [--python-events 1000000]

Generates (once, cached in the temp dir) synthetic DDP rank traces: compute kernels on
CUDA[0:7], AllReduce kernels on CUDA[0:20] overlapping them, a `train_step` region per step on
the CPU thread. Then, each in a fresh process:

1. One trace of `--events` records:
     otf2-print   `otf2-print traces.otf2 > /dev/null` (Debian otf2-tools: decodes and formats
                  every event), events/s by wall time and per CPU second
     analysis     `read_trace` with the C reader (the full per-step breakdown) in one process,
                  i.e. on one core: events/s by wall time and per CPU second
     ratio        analysis / otf2-print, per CPU second, and by wall time (target >= 1x, issue 30:
                  with HTA's figures, the CPU regions and the clock checks in the sweep)
     python       the Python reader on a `--python-events` trace, for reference
2. A run of `--ranks` ranks of `--rank-events` records each (the ranks' files are hard links of
   one generated rank): `analyse(jobs=1)` against `analyse(jobs=--jobs)`: wall time, speedup,
   peak RSS per worker, and the check that both reports are identical (target: --jobs 2 >= 1.5x
   --jobs 1 on two 5 M-event ranks, on 2 idle cores: `--ranks 2 --rank-events 5000000`).

Run it when the machine is quiet; it prints the load average (`uptime`) with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS_PER_STEP = 48
EVENTS_PER_STEP = 2 + 2 * KERNELS_PER_STEP + 2 * len(range(KERNELS_PER_STEP // 2, KERNELS_PER_STEP, 4))
GENERATOR_VERSION = 1
CACHE = Path(tempfile.gettempdir()) / "gpu-doctor-bench-timeline"


def cached_trace(events: int) -> Path:
    """The experiment folder of a generated trace with about `events` records (made once)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from timeline_tracegen import write_bench_trace

    steps = max(1, -(-events // EVENTS_PER_STEP))     # at least `events` records
    folder = CACHE / f"v{GENERATOR_VERSION}-{steps}steps"
    done = folder / "complete"
    if not done.exists():
        print(f"generating {steps * EVENTS_PER_STEP:,} events in {folder} ...", file=sys.stderr)
        start = time.perf_counter()
        written = write_bench_trace(folder / "scorep_rank_0", steps, KERNELS_PER_STEP)
        done.write_text(str(written))
        print(f"  {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return folder / "scorep_rank_0"


def cached_run(ranks: int, events: int) -> Path:
    """A run folder of `ranks` per-rank folders, hard links of one generated rank."""
    rank = cached_trace(events)
    run = CACHE / f"run-{ranks}x-{rank.parent.name}"
    if not (run / "complete").exists():
        shutil.rmtree(run, ignore_errors=True)
        for r in range(ranks):
            shutil.copytree(rank, run / f"scorep_rank_{r}", copy_function=os.link)
        (run / "complete").write_text("")
    return run


def events_in(experiment: Path) -> int:
    import otf2

    with otf2.reader.open(str(experiment / "traces.otf2")) as trace:
        return sum(int(location.number_of_events) for location in trace.definitions.locations)


def warm(folder: Path) -> None:
    """Read the files once so that every contender finds them in the page cache."""
    for path in folder.rglob("*"):
        if path.is_file():
            with path.open("rb") as f:
                while f.read(1 << 20):
                    pass


def otf2_print(experiment: Path, events: int) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(os.devnull, "w") as sink:
        subprocess.run(["otf2-print", str(experiment / "traces.otf2")], stdout=sink, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"events": events, "seconds": wall, "cpu": cpu}


# -- phases in a child process -------------------------------------------------------------------

def phase_read(experiment: Path, reader: str) -> dict[str, float]:
    import otf2  # noqa: F401  (imports are start-up, not reading: keep them out of the time)

    from doctor.timeline import creader
    from doctor.timeline.classify import compile_step_regex
    from doctor.timeline.trace import read_trace

    creader.available()

    cpu, start = time.process_time(), time.perf_counter()
    (rank,) = read_trace(experiment, compile_step_regex(None), reader=reader)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert rank.steps is not None and rank.whole_run.hidden > 0 and rank.reader == reader
    return {"events": rank.events, "seconds": wall, "cpu": cpu}


def phase_run(run: Path, jobs: int) -> dict[str, object]:
    from doctor.timeline import analyse
    from doctor.timeline.progress import Progress

    peaks: list[float] = []
    worker_cpu: list[float] = []

    def on_progress(update: Progress) -> None:
        if update.finished and update.peak_rss_mib:
            peaks.append(update.peak_rss_mib)
            worker_cpu.append(update.cpu_seconds)

    start, cpu = time.perf_counter(), time.process_time()
    report = analyse([run], jobs=jobs, on_progress=on_progress)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    own_peak = peak_rss_mib()          # before the JSON document below, which is the bench's
    ranks = report.runs[0].ranks
    digest = json.dumps(report.to_json(), sort_keys=True)
    return {"seconds": wall, "cpu": cpu + sum(worker_cpu), "ranks": len(ranks), "events": sum(r.events for r in ranks),
            "reader": report.reader, "worker_peak_mib": max(peaks, default=0.0),
            "own_peak_mib": own_peak, "digest": str(hash(digest)), "length": len(digest)}


def peak_rss_mib() -> float:
    """This process's peak resident memory. VmHWM, not ru_maxrss: Linux carries ru_maxrss over
    from the parent across fork+exec, so a child would report the bench driver's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(argv: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    name, path, arg = argv
    result = phase_read(Path(path), arg) if name == "read" else phase_run(Path(path), int(arg))
    print(json.dumps(result))


def in_child(*argv: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    out = subprocess.run([sys.executable, __file__, "--phase", *argv], capture_output=True, text=True,
                         check=True, cwd=ROOT, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def best(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: r["seconds"])


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} cores"


def rate(r: dict, key: str) -> float:
    return r["events"] / r[key] if r[key] else float("inf")


# -- the two figures -----------------------------------------------------------------------------

def figure_reader(events: int, python_events: int, repeat: int) -> float:
    experiment = cached_trace(events)
    count = events_in(experiment)
    warm(experiment)
    print(f"1. one rank, {count:,} events ({load()})")
    printed = best([otf2_print(experiment, count) for _ in range(repeat)])
    analysis = best([in_child("read", str(experiment), "c") for _ in range(repeat)])
    for name, r in (("otf2-print", printed), ("analysis (C reader, 1 core)", analysis)):
        print(f"   {name:<28} {r['seconds']:6.2f} s wall {r['cpu']:6.2f} s CPU   "
              f"{rate(r, 'seconds'):>12,.0f} events/s wall  {rate(r, 'cpu'):>12,.0f} events/CPU-s")
    ratio = rate(analysis, "cpu") / rate(printed, "cpu")
    print(f"   ratio analysis / otf2-print = {ratio:.2f}x per CPU second (target >= 1x), "
          f"{rate(analysis, 'seconds') / rate(printed, 'seconds'):.2f}x by wall time")
    if python_events:
        small = cached_trace(python_events)
        warm(small)
        python = best([in_child("read", str(small), "python") for _ in range(repeat)])
        print(f"   {'Python reader (reference)':<28} {python['seconds']:6.2f} s wall {python['cpu']:6.2f} s CPU   "
              f"{rate(python, 'seconds'):>12,.0f} events/s wall  ({python['events']:,} events)")
    return ratio


def figure_parallel(ranks: int, rank_events: int, jobs: int, repeat: int) -> None:
    run = cached_run(ranks, rank_events)
    warm(run)
    print(f"2. {ranks} ranks x {events_in(run / 'scorep_rank_0'):,} events ({load()})")
    serial = best([in_child("run", str(run), "1") for _ in range(repeat)])
    parallel = best([in_child("run", str(run), str(jobs)) for _ in range(repeat)])
    print(f"   --jobs 1  {serial['seconds']:6.2f} s wall {serial['cpu']:6.2f} s CPU   "
          f"{serial['events'] / serial['seconds']:>12,.0f} events/s   "
          f"peak RSS {serial['own_peak_mib']:.0f} MiB (one process)   reader {serial['reader']}")
    print(f"   --jobs {jobs}  {parallel['seconds']:6.2f} s wall {parallel['cpu']:6.2f} s CPU   "
          f"{parallel['events'] / parallel['seconds']:>12,.0f} events/s   "
          f"peak RSS per worker {parallel['worker_peak_mib']:.0f} MiB (parent {parallel['own_peak_mib']:.0f} MiB)")
    same = (serial["digest"], serial["length"]) == (parallel["digest"], parallel["length"])
    print(f"   speedup {serial['seconds'] / parallel['seconds']:.2f}x; reports identical: {'yes' if same else 'NO'}")
    if not same:
        raise SystemExit("the parallel report differs from the serial one")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=5_000_000, help="records in the one-rank trace")
    p.add_argument("--python-events", type=int, default=1_000_000, help="records for the Python reader (0: skip)")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--rank-events", type=int, default=4_000_000, help="records per rank in the run")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1, help="runs per measurement; the fastest counts")
    p.add_argument("--phase", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.phase:
        child(args.phase)
        return 0
    if shutil.which("otf2-print") is None:
        print("bench_timeline: otf2-print is not installed (Debian: otf2-tools)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from doctor.timeline import creader

    if not creader.available():
        print(f"bench_timeline: {creader.why_not()}", file=sys.stderr)
        return 2
    ratio = figure_reader(args.events, args.python_events, args.repeat)
    if args.ranks:
        figure_parallel(args.ranks, args.rank_events, args.jobs, args.repeat)
    return 0 if ratio >= 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
