"""Which network interface the ranks' sockets use: the one on this node's route to MASTER_ADDR.

Left alone, the libraries guess. gloo binds to the first address the node's *hostname*
resolves to that is its own, and falls back to 127.0.0.1 when none is ("Unable to resolve
hostname to a (local) address"). A hostname that resolves to 127.0.1.1 (Debian's /etc/hosts),
to 127.0.0.1, to nothing, or to a management network's address makes every rank advertise an
address the other nodes cannot reach: the classic multi-node hang. NCCL picks an interface of
its own (ib* first, then anything but lo and docker*). The kernel knows the right one: the
source address of its route to MASTER_ADDR, asked through a connected UDP socket (no packet
is sent), and the interface that holds that address.

Shell equivalent:
    ip route get 10.213.0.11        # 10.213.0.11 dev eth0 src 10.213.0.12
    getent ahosts "$(hostname)"     # what gloo binds to without GLOO_SOCKET_IFNAME
    export GLOO_SOCKET_IFNAME=eth0 NCCL_SOCKET_IFNAME=eth0
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
AUTO = "auto"
OFF = "off"
GLOO_FALLBACK = "127.0.0.1"


@dataclass(frozen=True)
class SocketRoute:
    """What this node answers about MASTER_ADDR and its own hostname (JSON-able: the probe's fact)."""

    hostname: str
    resolved: tuple[str, ...]          # the hostname's addresses, in getaddrinfo's order
    master: str                        # MASTER_ADDR as given
    master_ip: str = ""
    source: str = ""                   # this node's address on the route to master_ip
    interface: str = ""                # the interface holding `source`
    addresses: Mapping[str, tuple[str, ...]] | None = None   # interface -> its addresses
    error: str = ""

    def owner(self, addr: str) -> str:
        """The interface holding `addr` on this node ('' if none)."""
        for name, addrs in (self.addresses or {}).items():
            if addr in addrs:
                return name
        return "lo" if _loopback(addr) else ""

    def gloo_address(self) -> tuple[str, str]:
        """(address, interface) gloo binds to without GLOO_SOCKET_IFNAME."""
        for addr in self.resolved:
            name = self.owner(addr)
            if name:
                return addr, name
        return GLOO_FALLBACK, "lo"

    def problem(self) -> str | None:
        """Why gloo's own choice cannot work across nodes, in one sentence; None when it can."""
        if not self.interface or _loopback(self.master_ip):
            return None
        addr, name = self.gloo_address()
        if name == self.interface:
            return None
        if not self.resolved:
            said = f"hostname {self.hostname} does not resolve"
        elif addr == GLOO_FALLBACK and not self.owner(self.resolved[0]):
            said = f"hostname {self.hostname} resolves to {', '.join(self.resolved)}, no address of this node"
        else:
            said = f"hostname {self.hostname} resolves to {addr}" + (" (loopback)" if _loopback(addr) else
                                                                     f" on {name}")
        fallback = " (its fallback)" if addr == GLOO_FALLBACK and addr not in self.resolved else ""
        return (f"{said}: gloo binds to {addr}{fallback}, which the other nodes cannot reach; "
                f"{self.master} is reached through {self.interface} ({self.source})")

    def nccl_interface(self) -> str:
        """The interface NCCL picks without NCCL_SOCKET_IFNAME: the first ib*, else the first that
        is not lo or docker*, else lo (its order is the system's interface order)."""
        names = [n for n, addrs in (self.addresses or {}).items() if any(":" not in a for a in addrs)]
        for n in names:
            if n.startswith("ib"):
                return n
        return next((n for n in names if not n.startswith(("lo", "docker"))), "lo")

    def nccl_problem(self) -> str | None:
        """Why NCCL's own choice may not reach the master; None when it is the route's interface."""
        if not self.interface or _loopback(self.master_ip):
            return None
        pick = self.nccl_interface()
        if pick == self.interface:
            return None
        return (f"NCCL picks {pick} (ib* first, then any interface but lo and docker*), but {self.master} "
                f"is reached through {self.interface}")

    def to_fact(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["resolved"] = list(self.resolved)
        doc["addresses"] = {k: list(v) for k, v in (self.addresses or {}).items()}
        return doc

    @classmethod
    def from_fact(cls, doc: Mapping[str, Any]) -> SocketRoute:
        return cls(hostname=str(doc.get("hostname", "")), resolved=tuple(doc.get("resolved") or ()),
                   master=str(doc.get("master", "")), master_ip=str(doc.get("master_ip", "")),
                   source=str(doc.get("source", "")), interface=str(doc.get("interface", "")),
                   addresses={str(k): tuple(v) for k, v in (doc.get("addresses") or {}).items()},
                   error=str(doc.get("error", "")))


def _loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.split("%")[0]).is_loopback
    except ValueError:
        return addr.lower() == "localhost"


def local_addresses() -> dict[str, tuple[str, ...]]:
    """interface -> its IPv4/IPv6 addresses (psutil: getifaddrs)."""
    import psutil

    out: dict[str, tuple[str, ...]] = {}
    for name, addrs in psutil.net_if_addrs().items():
        found = tuple(a.address.split("%")[0] for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6))
        if found:
            out[name] = found
    return out


def resolve(name: str) -> tuple[str, ...]:
    """A name's addresses in getaddrinfo's order (what gloo tries), without repeats."""
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return ()
    seen: list[str] = []
    for info in infos:
        addr = str(info[4][0]).split("%")[0]
        if addr not in seen:
            seen.append(addr)
    return tuple(seen)


def route_source(ip: str) -> str:
    """This node's address on the kernel's route to `ip` (connect() on UDP sends nothing)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((ip, 9))
        return str(s.getsockname()[0]).split("%")[0]


def inspect(master: str, hostname: str | None = None) -> SocketRoute:
    """The route to `master` from here, and what this node's hostname resolves to."""
    host = hostname or socket.gethostname()
    addresses = local_addresses()
    base = SocketRoute(hostname=host, resolved=resolve(host), master=master, addresses=addresses)
    found = resolve(master)
    if not found:
        return replace(base, error=f"MASTER_ADDR {master} does not resolve here")
    ip = next((a for a in found if ":" not in a), found[0])
    try:
        source = route_source(ip)
    except OSError as exc:
        return replace(base, master_ip=ip,
                       error=f"no route to MASTER_ADDR {master} ({ip}): {exc.strerror or exc}")
    route = replace(base, master_ip=ip, source=source)
    interface = route.owner(source)
    if not interface:
        return replace(route, error=f"no interface holds {source}, the route's source")
    return replace(route, interface=interface)


@dataclass(frozen=True)
class SocketChoice:
    """The variables a rank gets, and the line that says why."""

    env: Mapping[str, str]
    line: str


def choose(env: Mapping[str, str], choice: str, where: str) -> SocketChoice:
    """GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME for a rank whose environment is `env`.

    The job's own values always stay. `choice`: an interface name (set as given), `auto` (the
    interface of the route to MASTER_ADDR), or `off` (nothing set). `where`: `rank 2 on node2`."""
    missing = [v for v in VARIABLES if not env.get(v)]
    own = " ".join(f"{v}={env[v]}" for v in VARIABLES if env.get(v))
    head = f"gpu-doctor: socket interface for {where}:"
    keep = f"; the job's own {own} stays" if own else ""
    if choice == OFF or not missing:
        return SocketChoice({}, f"{head} the job's own {own}" if own else "")
    if choice != AUTO:
        return SocketChoice({v: choice for v in missing},
                            f"{head} {choice} (--socket-ifname): " + " ".join(f"{v}={choice}" for v in missing)
                            + keep)
    route = inspect(env.get("MASTER_ADDR", ""))
    if not route.interface:
        return SocketChoice({}, f"{head} not set: {route.error}; the libraries choose (name it with "
                                "--socket-ifname)")
    why = route.problem()
    return SocketChoice({v: route.interface for v in missing},
                        f"{head} {route.interface} (the route to {route.master} leaves from {route.source}): "
                        + " ".join(f"{v}={route.interface}" for v in missing) + keep
                        + (f"; without it: {why}" if why else ""))


def plan_line(choice: str, env: Mapping[str, str], master: str) -> str:
    """What the launch plan says about the ranks' socket interface (the launcher's view)."""
    own = " ".join(f"{v}={env[v]}" for v in VARIABLES if env.get(v))
    rest = [v for v in VARIABLES if not env.get(v)]
    if not rest:
        return f"socket interface: the job's own {own}"
    kept = f" (the job's own {own} stays)" if own else ""
    names = ", ".join(rest)
    if choice == OFF:
        return f"socket interface: left to gloo and NCCL (--socket-ifname off){kept}"
    if choice == AUTO:
        return (f"socket interface: {names} set per node to the interface of its route to {master}{kept}; "
                "--socket-ifname NAME to name it")
    return f"socket interface: {names}={choice} on every node (--socket-ifname){kept}"
