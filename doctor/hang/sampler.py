"""Sample every rank twice, a few seconds apart, and say which ranks made progress in between.

Each round samples all ranks at once (one py-spy per rank, in threads), so the stacks are one
moment of the job. A rank whose main thread holds the GIL and does not move is sampled once
more with `--native` (the C frames say where it is).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from doctor.hang.groups import RankStack
from doctor.hang.stacks import Sample, holds_gil_in_c, sample

GAP_S = 2.0
CPU_EPSILON_S = 0.05    # CPU seconds between samples above this: the rank is computing, not waiting


def cpu_seconds(pid: int) -> float | None:
    """User+system CPU time of `pid` and its children (data loader workers), or None if gone."""
    try:
        import psutil

        proc = psutil.Process(pid)
        total = sum(proc.cpu_times()[:2])
        for child in proc.children(recursive=True):
            try:
                total += sum(child.cpu_times()[:2])
            except psutil.Error:
                continue
        return float(total)
    except Exception:
        return None


def _round(pids: Mapping[int, int], native: bool = False, nodes: Mapping[int, str] | None = None) -> dict[int, Sample]:
    if not pids:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(pids))) as pool:
        futures = {r: pool.submit(sample, pid, r, native, node=(nodes or {}).get(r, ""))
                   for r, pid in pids.items()}
        return {r: f.result() for r, f in futures.items()}


def sample_ranks(pids: Mapping[int, int], gap_s: float = GAP_S,
                 outputs: Callable[[], Mapping[int, int]] | None = None,
                 steps: Mapping[int, int | None] | None = None,
                 nodes: Mapping[int, str] | None = None) -> list[RankStack]:
    """Two rounds `gap_s` apart; `outputs()` gives each rank's output count (a launch's lines)."""
    cpu0 = {r: cpu_seconds(p) for r, p in pids.items()}
    out0 = dict(outputs()) if outputs else {}
    first = _round(pids, nodes=nodes)
    time.sleep(gap_s)
    second = _round(pids, nodes=nodes)
    cpu1 = {r: cpu_seconds(p) for r, p in pids.items()}
    out1 = dict(outputs()) if outputs else {}
    stacks = []
    for r in sorted(pids):
        c0, c1 = cpu0.get(r), cpu1.get(r)
        advanced = (c0 is not None and c1 is not None and c1 - c0 > CPU_EPSILON_S) or out1.get(r) != out0.get(r)
        stacks.append(RankStack(r, first[r], second[r], advanced, step=(steps or {}).get(r)))
    held = {rs.rank: pids[rs.rank] for rs in stacks
            if rs.second.ok and holds_gil_in_c(rs.second) and rs.first.frames == rs.second.frames}
    if held:
        natives = _round(held, native=True, nodes=nodes)
        stacks = [RankStack(rs.rank, rs.first, rs.second, rs.advanced, natives.get(rs.rank), rs.step)
                  for rs in stacks]
    return stacks
