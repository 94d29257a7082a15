"""How much measurement memory (`SCOREP_TOTAL_MEMORY`) a Python job needs under Score-P.

Measured with real Score-P 8.4 + scorep 4.5.1 on a 3-step, 2-rank gloo DDP job
(torch 2.13 CPU) whose ranks run under `python -m scorep` with the Python
instrumenter on: tracing `import torch` records ~800 000 region visits per rank.
The default 16000k aborts each rank before training ("No free memory page
available"); 24M aborts too, 32M holds a profile but not a trace, 48M holds both.
`--noinstrumenter` (user regions only) fits the default easily.

Used by SCP009 (before and after the run) and by `gpu-doctor launch`, which
sets `PROPOSED` per rank when the user has not set a value.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from doctor.jobfolder.scorep_values import TOTAL_MEMORY_LIMIT, SizeError, format_size, parse_size

DEFAULT = 16000 * 1024          # Score-P's default SCOREP_TOTAL_MEMORY (16000k)
TORCH_MINIMUM = 64 << 20        # below this the Python instrumenter cannot hold `import torch`
PROPOSED = "256M"               # per rank: 4x the measured minimum, room for real training steps
CEILING = 3500 << 20            # under Score-P's 4 GiB cap (SCP003's value)
NO_INSTRUMENTER = ("--noinstrumenter", "--nopython", "--no-instrumenter")  # --nopython: the same, in the bindings


def instrumenter_on(flags: Iterable[str]) -> bool:
    """Whether `python -m scorep FLAGS` traces every Python function (its default)."""
    return not any(f in NO_INSTRUMENTER for f in flags)


def propose_total_memory(too_small: int) -> str:
    """A value after Score-P's 'Please increase SCOREP_TOTAL_MEMORY=N': a power-of-two MiB at
    least 16 times N and at least PROPOSED, at most CEILING (16375808 -> 256M)."""
    want = max(16 * too_small, parse_size(PROPOSED))
    mib = 1
    while (mib << 20) < want:
        mib *= 2
    return format_size(min(mib << 20, CEILING))


@dataclass(frozen=True)
class MemoryVerdict:
    """What a setting of SCOREP_TOTAL_MEMORY means for a job that imports torch."""

    bytes: int | None          # None: not a size
    enough: bool
    reason: str


def judge(value: str | None, instrumenter: bool, imports_torch: bool) -> MemoryVerdict:
    """Will SCOREP_TOTAL_MEMORY=value (None: unset, the default) hold the measurement?"""
    shown = "the default 16000k" if value is None else f"SCOREP_TOTAL_MEMORY={value}"
    try:
        size = DEFAULT if value is None else parse_size(value)
    except SizeError as exc:
        return MemoryVerdict(None, False, f"{shown} is not a size Score-P accepts: {exc}")
    if size > TOTAL_MEMORY_LIMIT:
        size = TOTAL_MEMORY_LIMIT
        shown += f" (clamped by Score-P to {format_size(size)} bytes)"
    elif value is not None and format_size(size).upper() != value.strip().upper():
        shown += f" ({format_size(size)})"
    if not (instrumenter and imports_torch):
        return MemoryVerdict(size, True, f"{shown} is enough without the Python instrumenter tracing torch")
    if size < TORCH_MINIMUM:
        return MemoryVerdict(size, False, f"{shown} cannot hold the Python instrumenter's "
                                          f"trace of `import torch` (measured: 32M-48M for a 3-step job); "
                                          "each rank aborts with 'No free memory page available'")
    return MemoryVerdict(size, True, f"{shown} holds the Python instrumenter's trace of "
                                     "`import torch`")
