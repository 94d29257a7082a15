"""Which local ranks have joined the rendezvous, read from /proc (Linux).

With `init_method="env://"` every rank (rank 0 included) opens a TCP
connection to the store at MASTER_ADDR:MASTER_PORT and keeps it for the life
of the process group. A rank whose process owns an established socket to that
port has joined. Needs no torch and no change to the job.

Shell equivalent: `ss -tnp state established '( dport = :PORT )'`.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
ESTABLISHED = "01"
SYN_SENT = "02"


def available() -> bool:
    return (PROC / "net" / "tcp").exists()


def client_inodes(port: int, state: str = ESTABLISHED) -> set[str]:
    """Inodes of sockets in TCP `state` (established by default) whose remote port is `port`."""
    inodes: set[str] = set()
    want = f":{port:04X}"
    for table in ("tcp", "tcp6"):
        try:
            text = (PROC / "net" / table).read_text()
        except OSError:
            continue
        for line in text.splitlines()[1:]:
            cols = line.split()
            if len(cols) > 9 and cols[2].endswith(want) and cols[3] == state:
                inodes.add(cols[9])
    return inodes


def _descendants(pid: int) -> list[int]:
    """pid and its descendants (via /proc/PID/task/TID/children)."""
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < 512:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(PROC / str(p) / "task"):
                kids = (PROC / str(p) / "task" / task / "children").read_text().split()
                todo.extend(int(k) for k in kids)
        except (OSError, ValueError):
            continue
    return out


def socket_inodes(pid: int) -> set[str]:
    """Socket inodes held by a process and its descendants."""
    found: set[str] = set()
    for p in _descendants(pid):
        fd_dir = PROC / str(p) / "fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(fd_dir / name)
            except OSError:
                continue
            if target.startswith("socket:["):
                found.add(target[8:-1])
    return found


def joined(pids: dict[int, int], port: int) -> set[int]:
    """The ranks (of `{rank: pid}`) that hold a connection to the store port."""
    inodes = client_inodes(port)
    if not inodes:
        return set()
    return {rank for rank, pid in pids.items() if socket_inodes(pid) & inodes}



def connecting(pid: int, port: int) -> bool:
    """True while the process (or a descendant) has a connection to `port` that got no answer yet.

    A socket left in SYN-SENT is what a firewall that drops the packets looks like."""
    inodes = client_inodes(port, SYN_SENT)
    return bool(inodes and socket_inodes(pid) & inodes)
