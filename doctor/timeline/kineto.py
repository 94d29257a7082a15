"""torch.profiler / Kineto JSON traces (`*.pt.trace.json`, one per rank) into the timeline's model.

`torch.profiler.tensorboard_trace_handler(DIR)` writes one `HOST_PID.TIMESTAMP.pt.trace.json`
per rank; the rank is `distributedInfo.rank`. Events are Chrome-trace "X" records with `ts` and
`dur` in microseconds: GPU work has `cat` kernel / gpu_memcpy / gpu_memset (`pid` the device,
`tid` and `args.stream` the stream, `args.correlation` the launch), the launches are
cuda_runtime / cuda_driver records with the same `correlation`, and `ProfilerStep#N`
(user_annotation) marks the steps. The file is streamed (`iter_trace`: one event object
decoded at a time from a 1 MiB buffer), the events kept as small tuples, sorted, and run through
the same `RankSweep` as an OTF2 trace, in nanosecond ticks. Launch times make HTA's host wait
known here (OTF2 traces do not link kernels to their launches).
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from doctor.timeline.classify import DEFAULT_STEP_REGEX, Kind, region_kind
from doctor.timeline.model import RankTimeline
from doctor.timeline.sweep import RankSweep
from doctor.timeline.trace import gap_threshold, top_regions

SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
RESOLUTION = 1_000_000_000              # ticks per second: nanoseconds
CHUNK = 1 << 20
MAX_EVENT_CHARS = 64 << 20              # one event object larger than this is a damaged file
GPU_CATS = {"kernel": None, "gpu_memcpy": Kind.OTHER, "gpu_memset": Kind.OTHER, "Kernel": None,
            "Memcpy": Kind.OTHER, "Memset": Kind.OTHER}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
CPU_CATS = {"cpu_op", "user_annotation", "python_function", "Operator", "CPU Op", "Trace"}
PROFILER_STEP = re.compile(r"^ProfilerStep\s*#\s*\d+$")


class KinetoError(Exception):
    """The file is not a readable Kineto trace: the message names the file and the problem."""


def is_kineto(path: Path) -> bool:
    return path.name.endswith(SUFFIXES)


def kineto_files(folder: Path) -> list[Path]:
    """The Kineto traces directly in `folder`."""
    try:
        return sorted(p for p in folder.iterdir() if is_kineto(p) and p.is_file())
    except OSError:
        return []


class _Stream:
    """A JSON text read a chunk at a time; `value()` decodes the next value."""

    def __init__(self, f: IO[str]):
        self.f = f
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.decoder = json.JSONDecoder()
        self.consumed = 0

    def _fill(self) -> None:
        chunk = self.f.read(CHUNK)
        self.consumed += self.pos
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0
        self.eof = not chunk

    def peek(self) -> str:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos] if self.pos < len(self.buf) else ""
            self._fill()

    def expect(self, chars: str) -> str:
        got = self.peek()
        if not got or got not in chars:
            raise ValueError(f"expected {' or '.join(repr(c) for c in chars)} at character {self.consumed + self.pos}, "
                             f"found {got!r}" if got else f"the file ends at character {self.consumed + self.pos}")
        self.pos += 1
        return got

    def value(self) -> Any:
        self.peek()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self.eof or len(self.buf) - self.pos > MAX_EVENT_CHARS:
                    raise ValueError(f"{exc.msg} at character {self.consumed + exc.pos}") from None
                self._fill()
                continue
            if end == len(self.buf) and not self.eof:   # a number may go on in the next chunk
                self._fill()
                continue
            self.pos = end
            return value


def iter_trace(f: IO[str], meta: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The objects of `traceEvents`, one at a time; the other top-level keys go into `meta`.
    Raises ValueError naming where the text stops being a trace."""
    s = _Stream(f)
    s.expect("{")
    if s.peek() == "}":
        return
    while True:
        key = s.value()
        s.expect(":")
        if key == "traceEvents":
            s.expect("[")
            if s.peek() == "]":
                s.pos += 1
            else:
                while True:
                    event = s.value()
                    if isinstance(event, dict):
                        yield event
                    if s.expect(",]") == "]":
                        break
        else:
            meta[str(key)] = s.value()
        if s.expect(",}") == "}":
            return


def _open(path: Path) -> IO[str]:
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return path.open(encoding="utf-8", errors="replace")


def _ticks(value: Any) -> int:
    return round(float(value) * 1000)


def read_kineto(path: Path, step_regex: re.Pattern[str], window: str = "region", keep_steps: int = 10_000,
                on_events: Any = None) -> RankTimeline:
    """One rank's timeline from its Kineto trace; raises KinetoError."""
    meta: dict[str, Any] = {}
    gpu: list[tuple[int, int, int, int, int | None]] = []   # start, end, stream key, kind, correlation
    launches: dict[int, int] = {}
    cpu: list[tuple[int, int, str, int]] = []               # start, end, name, thread key
    streams: dict[tuple[Any, Any], int] = {}
    threads: dict[tuple[Any, Any], int] = {}
    devices: list[int | str] = []
    records = 0
    try:
        with _open(path) as f:
            for event in iter_trace(f, meta):
                records += 1
                if on_events is not None and records % 1_000_000 == 0:
                    on_events(records)
                if event.get("ph") != "X" or "ts" not in event:
                    continue
                cat, args = event.get("cat"), event.get("args") or {}
                start = _ticks(event["ts"])
                end = start + max(_ticks(event.get("dur", 0)), 0)
                name = str(event.get("name", ""))
                correlation = args.get("correlation") if isinstance(args, dict) else None
                if cat in GPU_CATS:
                    device = args.get("device", event.get("pid"))
                    key = (device, args.get("stream", event.get("tid")))
                    stream = streams.setdefault(key, len(streams))
                    if device not in devices:
                        devices.append(device if isinstance(device, int) else str(device))
                    fixed = GPU_CATS[cat]
                    kind = int(fixed) if fixed is not None else int(region_kind(name))
                    gpu.append((start, end, stream, kind, correlation if isinstance(correlation, int) else None))
                elif cat in LAUNCH_CATS:
                    if isinstance(correlation, int):
                        launches[correlation] = start
                elif cat in CPU_CATS:
                    thread = threads.setdefault((event.get("pid"), event.get("tid")), len(threads))
                    cpu.append((start, end, name, thread))
    except (OSError, ValueError, EOFError, UnicodeError) as exc:   # gzip raises OSError/EOFError
        raise KinetoError(f"{path}: not a readable Kineto trace ({exc})") from None
    if on_events is not None:
        on_events(records)
    if not (gpu or cpu):
        raise KinetoError(f"{path}: no trace events (not a torch.profiler trace?)")
    return _timeline(path, meta, gpu, launches, cpu, streams, devices, step_regex, window, keep_steps)


def _timeline(path: Path, meta: dict[str, Any], gpu: list[tuple[int, int, int, int, int | None]],
              launches: dict[int, int], cpu: list[tuple[int, int, str, int]], streams: dict[tuple[Any, Any], int],
              devices: list[int | str], step_regex: re.Pattern[str], window: str, keep_steps: int) -> RankTimeline:
    origin = min([e[0] for e in gpu] + [e[0] for e in cpu])
    end = max([e[1] for e in gpu] + [e[1] for e in cpu])
    names = sorted({e[2] for e in cpu})
    has_profiler_steps = any(PROFILER_STEP.match(n) for n in names)
    use_profiler_steps = has_profiler_steps and step_regex.pattern == DEFAULT_STEP_REGEX
    step_names = {n for n in names if (PROFILER_STEP.match(n) if use_profiler_steps else step_regex.search(n))}
    index = {n: i for i, n in enumerate(names)}
    # (time, order, ...): leaves before enters at one time; outer regions enter first, leave last
    records: list[tuple[Any, ...]] = []
    for start, stop, stream, kind, correlation in gpu:
        launch = launches.get(correlation) if correlation is not None else None
        records.append((start, 1, -stop, 0, stream, kind, launch))
        records.append((stop, 0, -start, 1, stream, kind, None))
    for start, stop, name, thread in cpu:
        records.append((start, 1, -stop, 2, thread, index[name], name in step_names))
        records.append((stop, 0, -start, 3, thread, index[name], name in step_names))
    records.sort(key=lambda r: r[:3])
    sweep = RankSweep(origin, RESOLUTION, window, keep_steps, gap_threshold(RESOLUTION))
    for time, _, _, what, where, which, extra in records:
        if what == 0:
            sweep.kernel_enter(time, which, where, extra)
        elif what == 1:
            sweep.kernel_leave(time, which, where)
        elif what == 2:
            sweep.region_enter(time, which, where)
            if extra:
                sweep.step_enter(time)
        else:
            sweep.region_leave(time, where)
            if extra:
                sweep.step_leave(time)
    sweep.events = len(records)
    notes = sweep.finish(end)
    if sweep.overflow:
        raise KinetoError(f"{path}: the time sums overflow 64 bits (damaged timestamps?); no figures are given")
    info = meta.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if not isinstance(rank, int):
        notes.append("no distributedInfo.rank in the trace: the rank is unknown")
        rank = None
    steps = sweep.steps(", ".join(sorted(step_names)[:1]) + (" ..." if len(step_names) > 1 else ""))
    hints = []
    if not gpu:
        notes.insert(0, "no GPU kernels in this trace: CUDA activity was not recorded")
        hints.append("no GPU kernels: profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")
    if steps is None:
        hints.append("no steps: call prof.step() once per iteration (ProfilerStep#N), or pass --step-regex")
    cut = sweep.hta_cut()
    hta = None
    if gpu:
        from dataclasses import replace

        hta = replace(cut, launches=bool(launches))
    return RankTimeline(
        label=path.name, rank=rank, experiment=path, devices=tuple(devices),
        gpu_locations=tuple(f"GPU {d} stream {s}" for (d, s) in streams), resolution=RESOLUTION,
        events=sweep.events, whole_run=sweep.whole_run(), steps=steps, notes=tuple(notes), reader="kineto",
        hta=hta, regions=top_regions(sweep, dict(enumerate(names)), RESOLUTION), format="kineto",
        hints=tuple(hints))
