"""Where the ranks of a multi-node launch run, and what losing a node took with it.

`srun --distribution=block --ntasks-per-node=N` puts ranks 0..N-1 on the first node,
N..2N-1 on the second, and so on; srun's own end-of-task lines
(`srun: error: node2: tasks 2-3: Killed`) say which node a failed task was on.

The srun tasks (doctor.launch.srun_task) report the rendezvous with one marker line each:
    gpu-doctor: rank 3 on node2 joined the rendezvous at 10.0.0.11:29512
    gpu-doctor: rank 3 on node2 cannot reach 10.0.0.11:29512 (no answer to the connection attempt)
    gpu-doctor: rank 3 on node2 can reach 10.0.0.11:29512
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from doctor.launch.events import RankResult, RankState

MARK = "gpu-doctor: rank"


def rank_nodes(hosts: Sequence[str], per_node: int) -> dict[int, str]:
    """rank -> node under block distribution."""
    return {node * per_node + local: host for node, host in enumerate(hosts) for local in range(per_node)}


@dataclass(frozen=True)
class RendezvousMark:
    rank: int
    node: str
    what: str          # joined | unreachable | reachable
    detail: str = ""


_MARK = re.compile(r"^gpu-doctor: rank (\d+) on (\S+) (joined the rendezvous at|cannot reach|can reach) "
                   r"(\S+)(?: \((.*)\))?\s*$")


def joined_line(rank: int, node: str, master: str) -> str:
    return f"gpu-doctor: rank {rank} on {node} joined the rendezvous at {master}"


def reach_line(rank: int, node: str, master: str, reachable: bool, detail: str = "") -> str:
    verb = "can reach" if reachable else "cannot reach"
    return f"gpu-doctor: rank {rank} on {node} {verb} {master}" + (f" ({detail})" if detail else "")


def parse_mark(text: str) -> RendezvousMark | None:
    m = _MARK.match(text)
    if not m:
        return None
    what = {"joined the rendezvous at": "joined", "cannot reach": "unreachable", "can reach": "reachable"}
    return RendezvousMark(int(m.group(1)), m.group(2), what[m.group(3)], m.group(5) or "")


def lost_nodes(results: Iterable[RankResult], nodes: dict[int, str]) -> dict[str, list[int]]:
    """Nodes whose every rank was killed by a signal nobody here sent: node -> its ranks."""
    by_node: dict[str, list[RankResult]] = {}
    for r in results:
        if r.rank in nodes:
            by_node.setdefault(nodes[r.rank], []).append(r)
    return {node: [r.rank for r in rs] for node, rs in by_node.items()
            if rs and all(r.state == RankState.FAILED and r.signal for r in rs)}


def ranks_text(ranks: Sequence[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
