"""What the gathered digests say, in words: pure functions, no torch.

Round one gives each rank's 8-byte digest; the ranks that share the most common one are the
majority (there is none when the two largest groups are as large). Round two gives each rank's
per-tensor digests; for every minority group, the first tensor (in name order) where its
digests differ from the reference group's is the one named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def ranks_text(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def missed_line(step: int, missing: Sequence[int], timeout_s: float) -> str:
    return f"step {step}: {ranks_text(missing)} missed the check (no digest within {timeout_s:g} s)"


def groups(values: Mapping[int, int]) -> list[list[int]]:
    """The ranks grouped by digest, largest group first (ties: the group of the lowest rank)."""
    by_value: dict[int, list[int]] = {}
    for r in sorted(values):
        by_value.setdefault(values[r], []).append(r)
    return sorted(by_value.values(), key=lambda rs: (-len(rs), rs))


def disagreements(step: int, values: Mapping[int, int], vectors: Mapping[int, Sequence[int]],
                  names: Sequence[str]) -> list[dict[str, Any]]:
    """One record per group of ranks that differs from the reference group (the majority)."""
    ordered = groups(values)
    if len(ordered) < 2:
        return []
    reference, minorities = ordered[0], ordered[1:]
    majority = reference if len(reference) > len(minorities[0]) else []
    ref = next((vectors[r] for r in reference if r in vectors), None)
    out = []
    for minority in minorities:
        vec = next((vectors[r] for r in minority if r in vectors), None)
        index = None if vec is None or ref is None else \
            next((i for i, (a, b) in enumerate(zip(vec, ref, strict=False)) if a != b), None)
        name = names[index] if index is not None and index < len(names) else None
        what = f"`{name}`" if name else "parameters"
        line = (f"step {step}: {'' if majority else 'no majority: '}{ranks_text(minority)}'s {what} "
                f"differs from {ranks_text(reference)}")
        out.append({"step": step, "minority": minority, "majority": majority, "reference": reference,
                    "tensor": name, "tensor_index": index, "line": line})
    return out
