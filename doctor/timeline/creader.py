"""Which reader streams the events: the C extension, or the otf2 package's Python callbacks.

`doctor.timeline._sweep` (built from `_sweep.c` at install time when the OTF2 C headers are
there, see setup.py) runs the interval sweep inside OTF2's Enter/Leave callbacks; the Python
reader (`trace._stream`) does the same arithmetic in `sweep.RankSweep`, one Python call per
event. Both give the same numbers (the tests compare them on every overlap trace); the C one is
an order of magnitude faster.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

C, PYTHON, AUTO = "c", "python", "auto"
READERS = (AUTO, C, PYTHON)
BATCH = 1 << 20                   # records per ReadEvents call: progress and Ctrl+C in between
NOT_BUILT = ("the C reader (doctor.timeline._sweep) is not built: install libopen-trace-format2-dev "
             "(or put a Score-P/OTF2 install's otf2-config on PATH) and reinstall gpu-doctor")


@dataclass(frozen=True)
class Selection:
    """What to stream: each location's ref, its rank's slot, and whether it is a GPU stream."""

    locations: list[tuple[Any, int, bool]]
    kinds: dict[int, int]
    step_regions: dict[int, str]
    start: int
    resolution: int


@functools.cache
def _extension() -> tuple[ModuleType | None, str]:
    try:
        _sweep = importlib.import_module("doctor.timeline._sweep")
    except ImportError as exc:
        reason = NOT_BUILT if "_sweep" in str(exc) and "No module" in str(exc) else f"{NOT_BUILT} ({exc})"
        return None, reason
    return _sweep, ""


def available() -> bool:
    return _extension()[0] is not None


def why_not() -> str:
    """Why the C reader cannot be used ("" when it can)."""
    return _extension()[1]


def choose(reader: str) -> str:
    """"c" or "python" for the asked `reader` ("auto": C where built; GPU_DOCTOR_TIMELINE_READER
    overrides auto). Raises ValueError when "c" is asked for and not built."""
    if reader not in READERS:
        raise ValueError(f"reader must be one of {', '.join(READERS)}, got {reader!r}")
    if reader == AUTO:
        reader = os.environ.get("GPU_DOCTOR_TIMELINE_READER", AUTO).strip().lower() or AUTO
        if reader not in READERS:
            reader = AUTO
    if reader == AUTO:
        return C if available() else PYTHON
    if reader == C and not available():
        raise ValueError(why_not())
    return reader


def stream(anchor: Path, selection: Selection, window: str, keep_steps: int, ranks: int,
           on_events: Callable[[int], None] | None) -> list[dict[str, Any]]:
    """Sweep the selected locations in C; one state per rank slot for `RankSweep.restore`.
    Raises RuntimeError with the OTF2 library's message when the events cannot be read."""
    module = _extension()[0]
    assert module is not None, why_not()
    size = max([*selection.kinds, *selection.step_regions, -1]) + 1
    kinds = bytearray([1]) * size            # refs without a definition count as compute, as in Python
    steps = bytearray(size)
    for ref, kind in selection.kinds.items():
        kinds[ref] = kind
    for ref in selection.step_regions:
        steps[ref] = 1
    locations = [(int(loc._ref), slot, is_gpu) for loc, slot, is_gpu in selection.locations]
    states: list[dict[str, Any]] = module.read(
        str(anchor), locations, bytes(kinds), bytes(steps), selection.start, 1 if window == "iteration" else 0,
        keep_steps, ranks, BATCH, on_events)
    return states
