"""What `gpu-doctor launch` accepts: ports, addresses, the run folder, and how many ranks fit here.

Each is one clear line for a user error (`--master-port 70000`, `--master-addr 'not a host'`,
`--run-dir /etc/hostname`), and `--nproc` is bounded by what this machine and its allocation
can hold, so `--nproc 100000000000` is refused instead of forking until the node falls over.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import resource
from pathlib import Path

from doctor.arguments import UsageError

_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
RANK_MEMORY = 256 * 1024 * 1024   # the least a Python rank with torch imported needs
RANKS_PER_CPU = 8                 # CPU-only gloo ranks share cores; more than this only thrash


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 1-65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is 1-65535, got {text!r}")
    return value


def host_address(text: str) -> str:
    """An argparse type: an IPv4/IPv6 address or a host name (RFC 1123 labels)."""
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    name = text[:-1] if text.endswith(".") else text
    if 0 < len(name) <= 253 and all(_LABEL.match(label) for label in name.split(".")):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is neither an IP address nor a host name")


def check_run_dir(text: str | None) -> None:
    """--run-dir must be a folder, or a path where one can be made."""
    if text is None:
        return
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--run-dir {text!r} exists and is not a folder")
    parent = next((p for p in (path.absolute(), *path.absolute().parents) if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise UsageError(f"--run-dir {text!r}: {parent} is not a folder")


def nproc_ceiling(env: dict[str, str]) -> tuple[int, str]:
    """(the most ranks this node can hold, why): CPUs, memory, the process limit, the allocation."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    bounds = [(cpus * RANKS_PER_CPU, f"{cpus} CPUs available here x {RANKS_PER_CPU} ranks per CPU")]
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        bounds.append((max(1, total // RANK_MEMORY),
                       f"{total / 2**30:.0f} GiB of memory at {RANK_MEMORY >> 20} MiB per rank"))
    except (ValueError, OSError):
        pass
    soft, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY and soft > 0:
        bounds.append((int(soft), f"the process limit (ulimit -u {soft})"))
    cpus_on_node = env.get("SLURM_CPUS_ON_NODE", "")
    if cpus_on_node.isdigit() and int(cpus_on_node) > 0:
        n = int(cpus_on_node) * RANKS_PER_CPU
        bounds.append((n, f"the Slurm allocation's {cpus_on_node} CPUs on this node x {RANKS_PER_CPU}"))
    return min(bounds)


def check_nproc(nproc: int, env: dict[str, str]) -> None:
    ceiling, why = nproc_ceiling(env)
    if nproc > ceiling:
        raise UsageError(f"--nproc {nproc}: this node holds at most {ceiling} ranks ({why})")
