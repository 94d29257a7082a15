"""Node names in Slurm's hostlist syntax: `n[003,017,042]`, `gpu[01-04,09],login1`.

What `scontrol show hostlist n003,n017,n042` prints, without needing Slurm: names that share a
prefix and a zero-padded number of the same width fold into one bracket, runs into ranges.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_NUMBERED = re.compile(r"(.*?)(\d+)\Z")


def _ranges(numbers: list[int], width: int) -> str:
    parts: list[str] = []
    start = prev = numbers[0]
    for n in numbers[1:] + [None]:  # type: ignore[list-item]
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
        if n is not None:
            start = prev = n
    return ",".join(parts)


def compress(names: Iterable[str]) -> str:
    """`names` as one hostlist expression (sorted, each name once); "" for none."""
    digits: dict[str, set[str]] = {}
    plain: set[str] = set()
    for name in names:
        m = _NUMBERED.match(name)
        if m:
            digits.setdefault(m.group(1), set()).add(m.group(2))
        else:
            plain.add(name)
    groups: dict[tuple[str, int], set[int]] = {}
    for prefix, found in digits.items():
        padded = any(d.startswith("0") and len(d) > 1 for d in found)
        for d in found:  # zero-padded names keep their width; unpadded ones of any length fold together
            groups.setdefault((prefix, len(d) if padded else 0), set()).add(int(d))
    out: list[tuple[str, str]] = [(n, n) for n in plain]
    for (prefix, width), numbers in groups.items():
        ordered = sorted(numbers)
        if len(ordered) == 1:
            text = f"{prefix}{ordered[0]:0{width}d}"
        else:
            text = f"{prefix}[{_ranges(ordered, width)}]"
        out.append((f"{prefix}{ordered[0]:0{width}d}", text))
    return ",".join(text for _key, text in sorted(out))
