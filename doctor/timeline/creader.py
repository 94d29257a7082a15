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
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
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
    end: int = 0
    names: dict[int, str] = field(default_factory=dict)          # location ref -> name
    region_names: dict[int, str] = field(default_factory=dict)   # region ref -> name

    @property
    def refs(self) -> list[int]:
        """The defined region refs, sorted: the C reader maps refs to these positions (a ref
        near 2^32 costs nothing more than a small one)."""
        return sorted(set(self.region_names) | set(self.kinds))


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
           on_events: Callable[[int], None] | None, gap_threshold: int = 1) -> list[dict[str, Any]]:
    """Sweep the selected locations in C; one state per rank slot for `RankSweep.restore`.
    Raises RuntimeError with the OTF2 library's message when the events cannot be read."""
    module = _extension()[0]
    assert module is not None, why_not()
    refs = selection.refs
    kinds = bytes(selection.kinds.get(ref, 1) for ref in refs)   # undefined refs count as compute, as in Python
    steps = bytes(1 if ref in selection.step_regions else 0 for ref in refs)
    locations = [(int(loc._ref), slot, is_gpu) for loc, slot, is_gpu in selection.locations]
    states: list[dict[str, Any]] = module.read(
        str(anchor), locations, array("Q", refs).tobytes(), kinds, steps, selection.start, selection.end,
        1 if window == "iteration" else 0, keep_steps, ranks, BATCH, on_events, gap_threshold)
    return states


def system_check(anchor: Path) -> str:
    """What the system's OTF2 library (the C reader's) says against the trace's anchor and
    global definitions: "" when it reads them, or where the C reader is not built."""
    module = _extension()[0]
    if module is None:
        return ""
    problem: str = module.check(str(anchor))
    return problem
