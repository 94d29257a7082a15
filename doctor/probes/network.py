"""The node's network facts for a job across nodes: `socket_route`.

Where MASTER_ADDR is (the environment's, else the Slurm allocation's first node as Slurm
reaches it), the kernel's route to it, and what this node's hostname resolves to: what gloo
and NCCL choose when the job names no socket interface (doctor.launch.ifname).

Shell equivalent: `ip route get $MASTER_ADDR; getent ahosts $(hostname)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from doctor.facts import ProbeContext, provider


def master_of(env: Mapping[str, str]) -> tuple[str, str]:
    """(MASTER_ADDR, where it came from); ('', why not) when this environment has none."""
    if env.get("MASTER_ADDR"):
        return env["MASTER_ADDR"], "MASTER_ADDR"
    from doctor.launch import slurm

    alloc = slurm.current_allocation(env)
    if alloc and alloc.hosts:
        return slurm.node_address(alloc.hosts[0], env), f"the allocation's first node {alloc.hosts[0]}"
    return "", "no MASTER_ADDR and no Slurm allocation here"


# Not eager: in a Slurm job it asks scontrol for the nodes; LNC004 asks for it only across nodes.
@provider("socket_route", timeout=20.0, eager=False)
def socket_route(ctx: ProbeContext) -> dict[str, Any]:
    from doctor.launch import ifname

    master, whence = master_of(ctx.case.env)
    if not master:
        route = ifname.SocketRoute(hostname=ctx.case.host, resolved=ifname.resolve(ctx.case.host), master="",
                                   error=whence)
    else:
        route = ifname.inspect(master, ctx.case.host)
    return route.to_fact() | {"whence": whence}
