"""A throwaway 3-node Slurm cluster on one machine: one network + UTS namespace per node.

    with MultiNodeSlurm(tmp) as cluster:          # node1..node3 at 10.213.0.11..13
        job = cluster.sbatch(script, "-N", "2")
        cluster.wait_job(job)
        cluster.in_node("node2", "iptables", ...)  # a command inside node2's namespace

Layout (DESIGN.md, "Multi-node Slurm on one machine"):
- bridge `gdmn0` with 10.213.0.1/24 in the host's network namespace: slurmctld's address
  (slurmctld runs in a UTS namespace named `gdctl`, so the conf never names this host);
- per node a network namespace `gdmn-nodeK` (a veth `gdmnK` on the bridge, `eth0` with
  10.213.0.1K/24 inside, loopback up) and a `slurmd` in its own UTS namespace whose hostname
  is nodeK. Each slurmd has port 6818 in its own namespace: nothing on the host's ports.
  Entered with `nsenter --net` (`ip netns exec` remounts /sys and slurmd loses cgroups);
- munged on a private socket in the cluster's folder (the system's /run/munge is untouched).

Only one test cluster runs at a time on a machine: this one and tests/slurm_cluster.py
take the same lock (`cluster_lock`). Everything is torn down by `stop()`, which also runs
on a failed start and at interpreter exit; `leftovers()` says what survived it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import LocalSlurm, SlurmUnavailable, cluster_lock, slurm_missing

BRIDGE = "gdmn0"
SUBNET = "10.213.0"
CONTROLLER = ("gdctl", f"{SUBNET}.1")
NODES = ("node1", "node2", "node3")
IFNAME = "eth0"                    # the node's interface inside its namespace (GLOO_SOCKET_IFNAME)


def netns(node: str) -> str:
    return f"gdmn-{node}"


def node_address(node: str) -> str:
    return f"{SUBNET}.{10 + NODES.index(node) + 1}"


def namespaces_missing() -> str | None:
    """Why this machine cannot host the cluster (a reason to skip), or None."""
    reason = slurm_missing()
    if reason:
        return reason
    for tool in ("ip", "nsenter", "unshare", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (.ci/run installs iproute2, util-linux and iptables)"
    probe = subprocess.run(["unshare", "--net", "--uts", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create network/UTS namespaces here: {probe.stderr.strip() or probe.returncode}"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


def _add_veth(name: str, ns: str) -> None:
    """A veth `name` on the host side, its peer eth0 in `ns`. The kernel destroys an earlier
    run's namespace, and with it that run's veth of the same name, asynchronously: retry for a
    few seconds, removing a leftover, before calling it a failure (with ip's own words)."""
    deadline = time.monotonic() + 10
    while True:
        done = _ip("link", "add", name, "type", "veth", "peer", "name", IFNAME, "netns", ns, check=False)
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"ip link add {name} (veth into {ns}) failed: {done.stderr.strip()}")
        _ip("link", "del", name, check=False)
        time.sleep(0.2)


def _our_namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith("gdmn-")]


def remove_network() -> None:
    """Delete this harness's namespaces and bridge (by their names); killing what runs inside."""
    for ns in _our_namespaces():
        for pid in _ip("netns", "pids", ns, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        _ip("netns", "delete", ns, check=False)
    if _ip("link", "show", BRIDGE, check=False).returncode == 0:
        _ip("link", "delete", BRIDGE, check=False)


class MultiNodeSlurm(LocalSlurm):
    """node1..node3, partition `debug`, optional Prolog; clients run here against 10.213.0.1."""

    def __init__(self, root: Path, prolog: Path | None = None, prolog_timeout: int = 60,
                 cpus: int = 2, scratch: Path | None = None, slurmd_timeout: int = 300,
                 resolve_names: bool = False) -> None:
        """`scratch`: a folder that is node-local on every node (a tmpfs of its own per node,
        in each slurmd's mount namespace), like /scratch or /tmp on a real cluster.
        `resolve_names`: the node names resolve on the nodes, as on a real cluster (an hosts
        file with node1..node3 bind-mounted over /etc/hosts in each slurmd's mount namespace;
        the machine's own /etc/hosts is untouched); off, they resolve nowhere.
        `slurmd_timeout`: SlurmdTimeout, how long slurmctld waits for a silent slurmd before it
        sets the node DOWN and fails its jobs (Slurm's default 300 s)."""
        super().__init__(root, prolog=prolog, prolog_timeout=prolog_timeout, cpus=cpus)
        self.scratch = scratch
        self.resolve_names = resolve_names
        self.slurmd_timeout = slurmd_timeout
        self.host = NODES[0]
        self.nodes = NODES
        self.ns_inodes: dict[str, int] = {}
        self.ctl_port = 0
        self.timings: dict[str, float] = {}

    # -- network -----------------------------------------------------------
    def make_network(self) -> None:
        remove_network()   # what a killed earlier run left (our names only)
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{CONTROLLER[1]}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for k, node in enumerate(NODES, 1):
            ns = netns(node)
            _ip("netns", "add", ns)
            self.ns_inodes[ns] = os.stat(f"/run/netns/{ns}").st_ino
            _add_veth(f"gdmn{k}", ns)
            _ip("link", "set", f"gdmn{k}", "master", BRIDGE, "up")
            _ip("-n", ns, "addr", "add", f"{node_address(node)}/24", "dev", IFNAME)
            _ip("-n", ns, "link", "set", IFNAME, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def in_node(self, node: str, *argv: str, check: bool = True,
                timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """A command inside node's network namespace (as root, like an admin on that node)."""
        return subprocess.run(["nsenter", f"--net=/run/netns/{netns(node)}", *argv], capture_output=True,
                              text=True, check=check, timeout=timeout)

    def node_pids(self, node: str) -> list[int]:
        return [int(p) for p in _ip("netns", "pids", netns(node), check=False).stdout.split()]

    # -- conf and daemons --------------------------------------------------
    def write_conf(self) -> None:
        for d in ("state", "spool", "log", "munge"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        r = self.root
        prolog = ""
        if self.prolog:
            prolog = (f"Prolog={self.prolog}\nPrologFlags=Alloc\n"
                      f"PrologEpilogTimeout={self.prolog_timeout}\n")
        self.conf.write_text(f"""ClusterName=gdmulti
SlurmctldHost={CONTROLLER[0]}({CONTROLLER[1]})
SlurmctldPort={self.ctl_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={r}/munge/munge.socket.2,cred_expire=10
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.%n.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
InactiveLimit=0
SlurmdTimeout={self.slurmd_timeout}
KillWait=2
MinJobAge=300
{prolog}NodeName=node[1-3] NodeAddr={SUBNET}.[11-13] CPUs={self.cpus} State=UNKNOWN
PartitionName=debug Nodes=node[1-3] Default=YES MaxTime=INFINITE State=UP
""")

    def start(self, timeout: float = 30.0) -> MultiNodeSlurm:
        """Lock, network, daemons; every node idle. On any failure everything is undone."""
        self._lock = cluster_lock()
        atexit.register(self.stop)
        try:
            self.make_network()
            self.ctl_port = _free_port_on(CONTROLLER[1])
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> MultiNodeSlurm:
        self.write_conf()
        self._start_munge(timeout)
        self._spawn(["unshare", "--uts", "sh", "-c",
                     f'hostname {CONTROLLER[0]} && exec /usr/sbin/slurmctld -D -i -f "$0"', str(self.conf)],
                    log_name="slurmctld")
        self._wait(self._scontrol_ok, timeout, "slurmctld did not answer")
        for node in NODES:
            self._spawn(["nsenter", f"--net=/run/netns/{netns(node)}", *self._node_command(node)],
                        log_name=f"slurmd.{node}")
        self._wait(lambda: all(self.node_state(n) == "idle" for n in NODES), timeout,
                   "the slurmds did not register")
        return self

    def _node_command(self, node: str) -> list[str]:
        """slurmd with the node's hostname (and, with `scratch`, its own scratch tmpfs)."""
        if self.scratch is None and not self.resolve_names:
            return ["unshare", "--uts", "sh", "-c", f'hostname {node} && exec /usr/sbin/slurmd -D -f "$0"',
                    str(self.conf)]
        mounts = ""
        if self.scratch is not None:
            self.scratch.mkdir(parents=True, exist_ok=True)
            mounts += f'mount -t tmpfs -o size=64m scratch-{node} "$1" && '
        hosts = self.root / "hosts"
        if self.resolve_names:
            hosts.write_text("127.0.0.1 localhost\n" + "".join(f"{node_address(n)} {n}\n" for n in NODES))
            mounts += 'mount --bind "$2" /etc/hosts && '
        return ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c",
                f'hostname {node} && {mounts}exec /usr/sbin/slurmd -D -f "$0"', str(self.conf),
                str(self.scratch or ""), str(hosts)]

    def stop(self) -> None:
        """Cancel the jobs, stop the daemons, kill what is left in the nodes, remove the network."""
        lock, self._lock = self._lock, None    # held until the network is gone too
        try:
            super().stop()
        finally:
            remove_network()
            if lock is not None:
                os.close(lock)
            atexit.unregister(self.stop)

    def leftovers(self) -> list[str]:
        """What outlived stop(): processes in our namespaces or of our daemons, namespaces, the bridge."""
        found = [f"network namespace {ns}" for ns in _our_namespaces()]
        if _ip("link", "show", BRIDGE, check=False).returncode == 0:
            found.append(f"bridge {BRIDGE}")
        inodes = set(self.ns_inodes.values())
        root = str(self.root)
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                net = os.stat(f"/proc/{entry}/ns/net").st_ino
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                    "utf-8", "replace")
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                continue   # a dead daemon may stay a zombie for 1-2 s here before it is reaped
            if net in inodes or root in cmdline:
                found.append(f"process {entry}: {cmdline.strip()[:160]}")
        return found

    # -- helpers for tests -------------------------------------------------
    def nodes_of(self, job: str) -> list[str]:
        return self.run("scontrol", "show", "hostnames", self.job_field(job, "NodeList")).stdout.split()


def _free_port_on(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])



@contextlib.contextmanager
def three_nodes(root: Path, **options: Any) -> Iterator[MultiNodeSlurm]:
    """A started cluster, stopped afterwards; then nothing of it may be left (else the test fails).

    Skips (with the reason) where Slurm or namespaces are not available here."""
    reason = namespaces_missing()
    if reason:
        pytest.skip(reason)
    cluster = MultiNodeSlurm(root, **options)
    t0 = time.monotonic()
    try:
        cluster.start()
    except SlurmUnavailable as exc:
        pytest.skip(str(exc))
    cluster.timings["start_s"] = time.monotonic() - t0
    try:
        yield cluster
    finally:
        t1 = time.monotonic()
        cluster.stop()
        cluster.timings["stop_s"] = time.monotonic() - t1
    left = poll_gone(cluster)
    assert not left, "left behind after the cluster stopped: " + "; ".join(left)
    assert cluster.timings["start_s"] < 60 and cluster.timings["stop_s"] < 60, cluster.timings


def poll_gone(cluster: MultiNodeSlurm, timeout: float = 5.0) -> list[str]:
    """leftovers(), waited for a little: a killed process takes a moment to disappear."""
    deadline = time.monotonic() + timeout
    while True:
        left = cluster.leftovers()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)
