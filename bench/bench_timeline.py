"""Events per second through `gpu-doctor timeline`'s analysis, against the otf2 reader's floor.

    python bench/bench_timeline.py [--events 5000000] [--small 1000000] [--repeat 1]

Generates (once, cached in the temp dir) a synthetic DDP rank trace with multi-million
Enter/Leave records: compute kernels on CUDA[0:7], AllReduce kernels on CUDA[0:20]
overlapping them, a `train_step` region per step on the CPU thread. Then, each in a fresh
process so that peak memory is its own:

  floor     the `otf2` package's reader iterating every event and doing nothing
            (`for location, event in trace.events: pass`)
  raw       the OTF2 global event reader with Enter/Leave callbacks that do nothing
            (the cheapest any Python analysis can be; for reference)
  analysis  `doctor.timeline.trace.read_trace` (the full per-step breakdown)

and prints events/s, the ratio analysis / floor (target >= 0.5x) and each phase's peak RSS.
Running the analysis on a smaller trace too shows that memory does not grow with the trace.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS_PER_STEP = 48
EVENTS_PER_STEP = 2 + 2 * KERNELS_PER_STEP + 2 * len(range(KERNELS_PER_STEP // 2, KERNELS_PER_STEP, 4))
GENERATOR_VERSION = 1


def cached_trace(events: int) -> Path:
    """The experiment folder of a generated trace with about `events` records (made once)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from timeline_tracegen import write_bench_trace

    steps = max(1, events // EVENTS_PER_STEP)
    folder = Path(tempfile.gettempdir()) / "gpu-doctor-bench-timeline" / f"v{GENERATOR_VERSION}-{steps}steps"
    done = folder / "complete"
    if not done.exists():
        print(f"generating {steps * EVENTS_PER_STEP:,} events in {folder} ...", file=sys.stderr)
        start = time.perf_counter()
        written = write_bench_trace(folder / "scorep_rank_0", steps, KERNELS_PER_STEP)
        done.write_text(str(written))
        print(f"  {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return folder / "scorep_rank_0"


def phase_floor(experiment: Path) -> int:
    import otf2

    count = 0
    with otf2.reader.open(str(experiment / "traces.otf2")) as trace:
        for _location, _event in trace.events:
            count += 1
    return count


def phase_raw(experiment: Path) -> int:
    import _otf2
    import otf2

    from doctor.timeline.trace import BATCH, _open_events

    reader = otf2.reader.Reader(str(experiment / "traces.otf2"))
    try:
        locations = list(reader.definitions.locations)
        handle = _open_events(reader.handle, locations, _otf2)
        callbacks = _otf2.GlobalEvtReaderCallbacks_New()

        def on_enter(*_args: object) -> None:
            pass

        def on_leave(*_args: object) -> None:
            pass

        _otf2.GlobalEvtReaderCallbacks_SetEnterCallback(callbacks, on_enter)
        _otf2.GlobalEvtReaderCallbacks_SetLeaveCallback(callbacks, on_leave)
        _otf2.GlobalEvtReader_SetCallbacks(handle, callbacks, None)
        _otf2.GlobalEvtReaderCallbacks_Delete(callbacks)
        while _otf2.GlobalEvtReader_ReadEvents(handle, BATCH) == BATCH:
            pass
        _otf2.Reader_CloseGlobalEvtReader(reader.handle, handle)
        _otf2.Reader_CloseEvtFiles(reader.handle)
        return sum(int(location.number_of_events) for location in locations)
    finally:
        reader.close()


def phase_analysis(experiment: Path) -> int:
    from doctor.timeline.classify import compile_step_regex
    from doctor.timeline.trace import read_trace

    (rank,) = read_trace(experiment, compile_step_regex(None))
    assert rank.steps is not None and rank.whole_run.hidden > 0
    return rank.events


PHASES = {"floor": phase_floor, "raw": phase_raw, "analysis": phase_analysis}


def run_phase(name: str, experiment: Path) -> dict[str, float]:
    """Run one phase in a fresh interpreter; returns events, seconds, peak RSS (MiB)."""
    out = subprocess.run([sys.executable, __file__, "--phase", name, str(experiment)],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


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


def child(name: str, experiment: Path) -> None:
    sys.path.insert(0, str(ROOT))
    start = time.perf_counter()
    events = PHASES[name](experiment)
    seconds = time.perf_counter() - start
    print(json.dumps({"events": events, "seconds": seconds, "peak_mib": peak_rss_mib()}))


def report(label: str, experiment: Path, repeat: int, phases: list[str]) -> dict[str, dict[str, float]]:
    results = {}
    for name in phases:
        runs = [run_phase(name, experiment) for _ in range(repeat)]
        best = min(runs, key=lambda r: r["seconds"])
        best["rate"] = best["events"] / best["seconds"]
        results[name] = best
        print(f"  {label:>6} {name:<9} {best['events']:>12,.0f} events  {best['seconds']:7.2f} s  "
              f"{best['rate']:>12,.0f} events/s  peak RSS {best['peak_mib']:7.1f} MiB")
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=5_000_000, help="records in the large trace")
    p.add_argument("--small", type=int, default=1_000_000, help="records in the small trace (0: skip)")
    p.add_argument("--repeat", type=int, default=1, help="runs per phase; the fastest counts")
    p.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    p.add_argument("experiment", nargs="?", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.phase:
        child(args.phase, args.experiment)
        return 0
    large = report("large", cached_trace(args.events), args.repeat, ["floor", "raw", "analysis"])
    ratio = large["analysis"]["rate"] / large["floor"]["rate"]
    print(f"analysis / floor = {ratio:.2f}x (target >= 0.5x); analysis / raw callbacks = "
          f"{large['analysis']['rate'] / large['raw']['rate']:.2f}x")
    if args.small:
        small = report("small", cached_trace(args.small), args.repeat, ["analysis"])
        print(f"peak RSS of the analysis: {small['analysis']['peak_mib']:.1f} MiB at "
              f"{small['analysis']['events']:,.0f} events, {large['analysis']['peak_mib']:.1f} MiB at "
              f"{large['analysis']['events']:,.0f} events")
    return 0 if ratio >= 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
