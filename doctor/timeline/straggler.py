"""Stragglers across steps: per step, which rank entered the step's collective last, and by how much.

In DDP every rank waits in the gradient AllReduce for the last one to arrive, so the rank whose
last NCCL kernel of a step starts latest held the others up (Holistic Trace Analysis' "late
start of the dominant collective"; HTA counts only kernels named `ncclKernel*`, this counts
`ncclDevKernel*` too). Over the run: each rank's share of last arrivals, the culprit (the rank
with the largest share), and its stability (that share: 1.0 = the same rank every step).

Steps are matched by their index on each rank; as HTA does, the last step is left out (its
kernels may run past the end of the trace) when there are two steps or more. Start times are
on each rank's own trace clock: ranks of one node share it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from doctor.timeline.model import RankTimeline


@dataclass(frozen=True)
class Stragglers:
    steps: int
    per_step: tuple[tuple[int, int | str, float], ...]   # (step, last rank, lag behind the median, s)
    share: dict[str, float]                              # rank -> share of last arrivals
    culprit: int | str
    stability: float

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "culprit": self.culprit, "stability": self.stability,
                "share": self.share,
                "per_step": [{"step": s, "rank": r, "lag_s": lag} for s, r, lag in self.per_step]}


def find_stragglers(ranks: Sequence[RankTimeline]) -> Stragglers | None:
    """None unless two ranks or more have steps with NCCL kernels."""
    starts = []
    for rank in ranks:
        if rank.steps is None or not any(t >= 0 for t in rank.steps.comm_starts):
            continue
        name: int | str = rank.rank if rank.rank is not None else rank.label
        r = rank.steps.total.resolution
        starts.append((name, [t / r if t >= 0 else None for t in rank.steps.comm_starts]))
    if len(starts) < 2:
        return None
    steps = min(len(s) for _, s in starts)
    if steps >= 2:
        steps -= 1
    per_step = []
    for k in range(steps):
        arrivals: list[tuple[float, int | str]] = [(t, name) for name, s in starts if (t := s[k]) is not None]
        if len(arrivals) < 2:
            continue
        latest, who = max(arrivals, key=lambda a: a[0])
        lag = latest - statistics.median(t for t, _ in arrivals)
        per_step.append((k, who, lag))
    if not per_step:
        return None
    counts: dict[str, int] = {str(name): 0 for name, _ in starts}
    for _, who, _ in per_step:
        counts[str(who)] += 1
    share = {name: n / len(per_step) for name, n in counts.items()}
    culprit_key = max(share, key=lambda n: (share[n], -list(share).index(n)))
    culprit = next(name for name, _ in starts if str(name) == culprit_key)
    return Stragglers(len(per_step), tuple(per_step), share, culprit, share[culprit_key])
