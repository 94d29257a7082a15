"""The hang verdict: which ranks diverged, what the others wait in, in one sentence; `hang.json`.

    ranks 0, 2, 3 wait in all_reduce (train.py:43, step 50); rank 1 is in barrier (train.py:63):
    rank 1 diverged

The majority is the largest group (ties: the one in a collective, then the lowest rank); every
other sampled rank diverged. One group for every rank is a symmetric stall: no rank diverged, so
the ranks wait on the interconnect or a device, not on each other's code.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor.atomic import write_atomic
from doctor.hang.groups import Group, RankStack, group_ranks
from doctor.hang.stacks import sample_to_json
from doctor.launch.placement import ranks_text

HANG_JSON = "hang.json"
STACKS_DIR = "hang-stacks"
SYMMETRIC_HINT = ("every rank is in the same place, so they wait on the interconnect or a device, not on each "
                  "other's code: on each node run `gpu-doctor --check-only --level 2` (P2P002, peer copies, and "
                  "the node checks GPU001-GPU005), and rerun with NCCL_DEBUG=INFO to see where NCCL waits")


@dataclass(frozen=True)
class Verdict:
    """What `hang.json` holds. `diverged_ranks` is [] when none diverged."""

    diverged_ranks: tuple[int, ...]
    groups: tuple[Group, ...]
    collective: dict[str, Any] | None
    verdict: str
    at: float = field(default_factory=time.time)
    stalled_s: float | None = None
    source: str = ""                 # launch, pids, job JOBID
    flight_recorder: dict[str, Any] | None = None

    @property
    def short(self) -> str:
        """The app's line: 'rank 1 diverged (DataLoader)' or 'no rank diverged (all_reduce)'."""
        if self.diverged_ranks:
            minority = [g for g in self.groups if set(g.ranks) & set(self.diverged_ranks) and not g.reason]
            tag = minority[0].tag if minority else "?"
            return f"{ranks_text(list(self.diverged_ranks))} diverged ({tag})"
        sampled = [g for g in self.groups if not g.reason]
        return f"no rank diverged ({sampled[0].tag})" if sampled else "no rank could be sampled"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"diverged_ranks": list(self.diverged_ranks),
                               "groups": [g.to_json() for g in self.groups],
                               "collective": self.collective, "verdict": self.verdict, "at": self.at,
                               "source": self.source}
        if self.stalled_s is not None:
            doc["stalled_s"] = round(self.stalled_s, 1)
        if self.flight_recorder is not None:
            doc["flight_recorder"] = self.flight_recorder
        return doc


def _in(g: Group, steps: Mapping[int, int | None], nodes: bool = True) -> str:
    where = [g.where] if g.where else []
    known = [steps[r] for r in g.ranks if steps.get(r) is not None]
    if known:
        where.append(f"after step {min(v for v in known if v is not None)}")
    on = sorted({n for n in g.nodes if n})
    if nodes and on:
        where.append(f"on {', '.join(on)}")
    return f"{g.what or '?'}" + (f" ({', '.join(where)})" if where else "")


def _majority(sampled: Sequence[Group]) -> Group:
    return max(sampled, key=lambda g: (len(g.ranks), g.collective is not None, -g.ranks[0]))


def judge(stacks: Sequence[RankStack], source: str = "", stalled_s: float | None = None) -> Verdict:
    groups = tuple(group_ranks(stacks))
    steps = {s.rank: s.step for s in stacks}
    sampled = [g for g in groups if not g.reason]
    unsampled = [g for g in groups if g.reason]
    tail = "".join(f"; {ranks_text(list(g.ranks))} could not be sampled: {g.reason}" for g in unsampled)
    if not sampled:
        return Verdict((), groups, None, "no rank could be sampled" + tail, stalled_s=stalled_s, source=source)
    major = _majority(sampled)
    who = (f"all {len(major.ranks)} ranks" if len(sampled) == 1 and not unsampled and len(major.ranks) > 1
           else ranks_text(list(major.ranks)))
    one = len(major.ranks) == 1
    verb = ("runs in" if one else "run in") if major.moving else ("waits in" if one else "wait in")
    collective = ({"op": major.collective, "where": major.where, "ranks": list(major.ranks),
                   "step": min((v for r in major.ranks if (v := steps.get(r)) is not None), default=None)}
                  if major.collective else None)
    if len(sampled) == 1:
        text = f"{who} {verb} {_in(major, steps)}: no rank diverged"
        if not major.moving:
            text += f"; {SYMMETRIC_HINT}"
        return Verdict((), groups, collective, text + tail, stalled_s=stalled_s, source=source)
    others = [g for g in sampled if g is not major]
    diverged = tuple(sorted(r for g in others for r in g.ranks))
    parts = [f"{who} {verb} {_in(major, steps)}"]
    for g in others:
        state = "is" if len(g.ranks) == 1 else "are"
        parts.append(f"{ranks_text(list(g.ranks))} {state} in {_in(g, steps)}" + (" (still moving)" if g.moving else ""))
    text = "; ".join(parts) + f": {ranks_text(list(diverged))} diverged"
    return Verdict(diverged, groups, collective, text + tail, stalled_s=stalled_s, source=source)


def with_flight_recorder(verdict: Verdict, result: dict[str, Any]) -> Verdict:
    """The verdict with the Flight Recorder's reading (`flight.read_run`) beside it."""
    from dataclasses import replace

    return replace(verdict, flight_recorder=result,
                   verdict=f"{verdict.verdict}; Flight Recorder: {result.get('summary', '')}")


def stack_text(rs: RankStack) -> str:
    """A rank's samples as py-spy prints them, for the raw stacks file."""
    lines = []
    for label, s in (("sample 1", rs.first), ("sample 2", rs.second), ("native", rs.native)):
        if s is None:
            continue
        lines.append(f"== rank {rs.rank} pid {s.pid}{' on ' + s.node if s.node else ''}: {label} at "
                     f"{time.strftime('%H:%M:%S', time.localtime(s.at))}")
        if s.reason:
            lines.append(f"   cannot sample: {s.reason}")
        for t in s.threads:
            lines.append(f"Thread {t.os_thread_id or t.thread_id} ({t.name or 'unnamed'})"
                         + (" [holds the GIL]" if t.owns_gil else "") + (" [active]" if t.active else " [idle]"))
            lines += [f"    {f.function} ({f.file}:{f.line})" for f in t.frames]
    return "\n".join(lines) + "\n"


def write(run_dir: Path, verdict: Verdict, stacks: Sequence[RankStack]) -> Path:
    """hang.json and hang-stacks/ (one text and one JSON file per rank) in `run_dir`; the stacks first,
    so hang.json never names files that are not there."""
    folder = run_dir / STACKS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for rs in stacks:
        write_atomic(folder / f"rank_{rs.rank}.txt", stack_text(rs).encode())
        raw = {"rank": rs.rank, "advanced": rs.advanced, "samples": [sample_to_json(s) for s in
                                                                     (rs.first, rs.second, rs.native) if s]}
        write_atomic(folder / f"rank_{rs.rank}.json", json.dumps(raw, indent=1).encode())
    path = run_dir / HANG_JSON
    doc = verdict.to_json()
    doc["stacks"] = STACKS_DIR
    write_atomic(path, (json.dumps(doc, indent=2) + "\n").encode())
    return path


def read(path: Path) -> dict[str, Any]:
    """hang.json as written (raises OSError / ValueError)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or "verdict" not in doc:
        raise ValueError(f"{path}: not a gpu-doctor hang.json (no 'verdict')")
    return doc


def group_lines(groups: Sequence[Mapping[str, Any]] | Sequence[Group], frames: int = 4) -> list[str]:
    """The grouped stacks for a person: 'ranks 0, 2, 3 (stuck): all_reduce at train.py:43' and frames."""
    out = []
    for g in groups:
        doc = g.to_json() if isinstance(g, Group) else g
        head = f"{ranks_text(list(doc['ranks']))}"
        if doc.get("reason"):
            out.append(f"{head}: cannot sample: {doc['reason']}")
            continue
        state = "moving" if doc.get("moving") else "stuck"
        out.append(f"{head} ({state}): {doc.get('what') or '?'}" + (f" at {doc['where']}" if doc.get("where") else ""))
        shown = doc.get("frames", [])[:frames]
        out += [f"    {f['function']} ({Path(f['file']).name}:{f['line']})" for f in shown]
        if len(doc.get("frames", [])) > frames:
            out.append(f"    ... {len(doc['frames']) - frames} outer frames")
        native = doc.get("native_frames", [])
        if native:
            out.append("    native: " + " <- ".join(f["function"] for f in native[:5]))
        elif doc.get("native_reason"):
            out.append(f"    native: none ({doc['native_reason']})")
    return out
