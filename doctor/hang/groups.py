"""STAT-style equivalence classes: ranks whose stacks have the same frame path form one group.

Two samples a few seconds apart tell a stuck rank (same path both times, no CPU or output
progress) from a moving one. Each group is named by its landmark: the collective it waits in
(`all_reduce`, `barrier`, ...), the data loader, or else its innermost frame; and by the user's
own line that called it (`train.py:43`).
"""

from __future__ import annotations

import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor.hang.stacks import Frame, Sample

# torch.distributed functions a rank waits in (distributed_c10d.py's names).
COLLECTIVES = frozenset({
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "all_gather_coalesced", "broadcast", "broadcast_object_list", "barrier", "monitored_barrier", "reduce",
    "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "gather_object",
    "scatter", "scatter_object_list", "send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list",
    "recv_object_list", "new_group", "init_process_group", "destroy_process_group",
})
_LIBRARY_MARKS = ("site-packages/", "dist-packages/", "<frozen", "<built-in")


@dataclass(frozen=True)
class RankStack:
    """What the sampler saw of one rank: two samples, and whether it made progress in between."""

    rank: int
    first: Sample
    second: Sample
    advanced: bool = False          # CPU time or output grew between the samples
    native: Sample | None = None    # a native sample, for a rank holding the GIL in C
    step: int | None = None

    @property
    def reason(self) -> str | None:
        return self.second.reason if not self.second.ok else None

    @property
    def moving(self) -> bool:
        return self.advanced or (self.first.ok and self.first.frames != self.second.frames)


@dataclass(frozen=True)
class Group:
    """Ranks with one frame path (innermost frame first). `reason`: a group of ranks not sampled."""

    ranks: tuple[int, ...]
    frames: tuple[Frame, ...]
    moving: bool
    what: str = ""                      # all_reduce, DataLoader.__next__, or the innermost function
    where: str = ""                     # the user's line that led there: train.py:43
    reason: str | None = None
    native: tuple[Frame, ...] = ()      # a GIL-holding rank's native frames, innermost first
    native_reason: str | None = None    # why a GIL-holding rank has none
    nodes: tuple[str, ...] = field(default=())

    @property
    def collective(self) -> str | None:
        return self.what if self.what in COLLECTIVES else None

    @property
    def tag(self) -> str:
        """The short name the app shows: DataLoader, all_reduce, the function."""
        base = self.what.split(" (", 1)[0]
        return "DataLoader" if base.startswith("DataLoader") else base or "?"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"ranks": list(self.ranks), "frames": [f.to_json() for f in self.frames],
                               "moving": self.moving, "what": self.what, "where": self.where}
        if self.nodes and any(self.nodes):
            doc["nodes"] = list(self.nodes)
        if self.reason:
            doc["reason"] = self.reason
        if self.native:
            doc["native_frames"] = [f.to_json() for f in self.native]
        if self.native_reason:
            doc["native_reason"] = self.native_reason
        return doc


def _stdlib() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(p for p in {paths.get("stdlib", ""), paths.get("platstdlib", "")} if p)


STDLIB = _stdlib()


def is_library(frame: Frame) -> bool:
    """Not the user's code: torch, other installed packages, the standard library."""
    f = frame.file
    return any(m in f for m in _LIBRARY_MARKS) or f.startswith(STDLIB) or f.startswith("torch/")


def landmark(frames: Sequence[Frame]) -> tuple[str, int | None]:
    """(what the rank is in, the index of that frame), innermost first."""
    for i, f in enumerate(frames):
        name = f.function.rsplit(".", 1)[-1]
        if "torch/distributed" in f.file and name in COLLECTIVES:
            return name, i
        if f.file.endswith("torch/utils/data/dataloader.py") and name == "__next__":
            return "DataLoader.__next__", i
    if not frames:
        return "", None
    return frames[0].function, 0


def user_line(frames: Sequence[Frame], start: int | None) -> str:
    """The user's own line at or outside frame `start`: `train.py:43`."""
    for f in frames[start or 0:]:
        if not is_library(f):
            return f.where
    return frames[start].where if start is not None and start < len(frames) else ""


def group_ranks(stacks: Sequence[RankStack]) -> list[Group]:
    """The equivalence classes, largest first (then by lowest rank); unsampled ranks last, by reason."""
    by_path: dict[tuple[Frame, ...], list[RankStack]] = {}
    by_reason: dict[str, list[RankStack]] = {}
    for rs in sorted(stacks, key=lambda s: s.rank):
        if rs.reason:
            by_reason.setdefault(rs.reason, []).append(rs)
        else:
            by_path.setdefault(rs.second.frames, []).append(rs)
    groups = [_group(path, members) for path, members in by_path.items()]
    groups.sort(key=lambda g: (-len(g.ranks), g.ranks[0]))
    groups += [Group(tuple(r.rank for r in members), (), False, reason=reason,
                     nodes=tuple(r.second.node for r in members)) for reason, members in by_reason.items()]
    return groups


def _group(path: tuple[Frame, ...], members: list[RankStack]) -> Group:
    what, at = landmark(path)
    native: tuple[Frame, ...] = ()
    native_reason: str | None = None
    held = next((m for m in members if m.second.main is not None and m.second.main.owns_gil
                 and m.first.frames == m.second.frames), None)
    if held is not None:
        if held.native is not None and held.native.ok:
            native = held.native.frames
        else:
            native_reason = (held.native.reason if held.native is not None else None) or \
                "no native sample was taken"
        c_frame = next((f for f in native if f.line == 0 or f.file.endswith((".so", ".c"))), None)
        what = f"{what} (in C, holding the GIL" + (f": {c_frame.function} in {Path(c_frame.file).name})"
                                                    if c_frame else ")")
    return Group(tuple(m.rank for m in members), path, any(m.moving for m in members), what,
                 user_line(path, at), native=native, native_reason=native_reason,
                 nodes=tuple(m.second.node for m in members))
