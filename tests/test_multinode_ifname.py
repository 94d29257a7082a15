"""The ranks' socket interface across nodes (doctor.launch.ifname): what the hostname resolves
to, the kernel's route to MASTER_ADDR, and what a rank gets set.

The namespace tests build a node of their own with `unshare --net --uts` (anonymous: no fixed
names, nothing to collide with): a hostname that resolves to nothing or to loopback, an
interface `ib0`, a second one `mgmt0` (veth pairs) for a management network, and the route between them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from jobfolder_util import run_check, write_job

from doctor.facts import ProbeFailure
from doctor.launch import ifname
from doctor.launch.ifname import SocketRoute
from doctor.launch.spec import LaunchSpec
from doctor.launch.srun_task import REFUSED, SILENCE, reachable
from doctor.model import Outcome, Status

ADDRS = {"lo": ("127.0.0.1", "::1"), "mgmt0": ("192.168.7.12",), "ib0": ("10.40.0.12",)}


def route(resolved: tuple[str, ...], master: str = "10.40.0.11", source: str = "10.40.0.12",
          interface: str = "ib0") -> SocketRoute:
    return SocketRoute("gpu012", resolved, master, master, source, interface, ADDRS)


@pytest.mark.parametrize("resolved, problem", [
    ((), "hostname gpu012 does not resolve: gloo binds to 127.0.0.1 (its fallback), which the other nodes "
         "cannot reach; 10.40.0.11 is reached through ib0 (10.40.0.12)"),
    (("127.0.1.1",), "hostname gpu012 resolves to 127.0.1.1 (loopback): gloo binds to 127.0.1.1, which the "
                     "other nodes cannot reach; 10.40.0.11 is reached through ib0 (10.40.0.12)"),
    (("192.168.7.12", "10.40.0.12"), "hostname gpu012 resolves to 192.168.7.12 on mgmt0: gloo binds to "
                                     "192.168.7.12, which the other nodes cannot reach; 10.40.0.11 is reached "
                                     "through ib0 (10.40.0.12)"),
    (("172.16.0.9",), "hostname gpu012 resolves to 172.16.0.9, no address of this node: gloo binds to "
                      "127.0.0.1 (its fallback), which the other nodes cannot reach; 10.40.0.11 is reached "
                      "through ib0 (10.40.0.12)"),
    (("10.40.0.12",), None),
    (("172.16.0.9", "10.40.0.12"), None),     # gloo skips what it cannot bind, and finds ib0's
])
def test_what_gloo_would_bind_to_is_judged_against_the_route_to_the_master(
        resolved: tuple[str, ...], problem: str | None) -> None:
    assert route(resolved).problem() == problem


def test_a_single_node_run_over_loopback_has_no_problem() -> None:
    assert route(("127.0.1.1",), master="127.0.0.1", source="127.0.0.1", interface="lo").problem() is None


def test_the_fact_survives_json() -> None:
    r = route(("127.0.1.1",))
    assert SocketRoute.from_fact(json.loads(json.dumps(r.to_fact()))) == r


def test_the_jobs_own_variables_are_never_overridden() -> None:
    both = {"GLOO_SOCKET_IFNAME": "eth9", "NCCL_SOCKET_IFNAME": "^docker,lo", "MASTER_ADDR": "127.0.0.1"}
    for choice in ("auto", "ib0", "off"):
        got = ifname.choose(both, choice, "rank 0 on gpu012")
        assert got.env == {}
        assert got.line == ("gpu-doctor: socket interface for rank 0 on gpu012: the job's own "
                            "GLOO_SOCKET_IFNAME=eth9 NCCL_SOCKET_IFNAME=^docker,lo")
    one = ifname.choose({"NCCL_SOCKET_IFNAME": "ib0", "MASTER_ADDR": "127.0.0.1"}, "eth2", "rank 1 on gpu012")
    assert one.env == {"GLOO_SOCKET_IFNAME": "eth2"}
    assert one.line == ("gpu-doctor: socket interface for rank 1 on gpu012: eth2 (--socket-ifname): "
                        "GLOO_SOCKET_IFNAME=eth2; the job's own NCCL_SOCKET_IFNAME=ib0 stays")
    assert ifname.choose({"MASTER_ADDR": "127.0.0.1"}, "off", "rank 0 on gpu012") == ifname.SocketChoice({}, "")


def test_auto_names_the_interface_of_the_route_here() -> None:
    got = ifname.choose({"MASTER_ADDR": "127.0.0.1"}, "auto", "rank 0 on here")
    assert got.env == {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}
    assert got.line.startswith("gpu-doctor: socket interface for rank 0 on here: lo (the route to 127.0.0.1 "
                               "leaves from 127.0.0.1): GLOO_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo")


def test_a_master_that_does_not_resolve_sets_nothing_and_says_why() -> None:
    got = ifname.choose({"MASTER_ADDR": "no-such-host.invalid"}, "auto", "rank 3 on gpu012")
    assert got.env == {}
    assert got.line == ("gpu-doctor: socket interface for rank 3 on gpu012: not set: MASTER_ADDR "
                        "no-such-host.invalid does not resolve here; the libraries choose (name it with "
                        "--socket-ifname)")


def test_the_launch_plan_says_what_the_ranks_get() -> None:
    assert ifname.plan_line("auto", {}, "10.40.0.11") == (
        "socket interface: GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME set per node to the interface of its route "
        "to 10.40.0.11; --socket-ifname NAME to name it")
    assert ifname.plan_line("off", {}, "10.40.0.11") == "socket interface: left to gloo and NCCL (--socket-ifname off)"
    assert ifname.plan_line("auto", {"GLOO_SOCKET_IFNAME": "ib0", "NCCL_SOCKET_IFNAME": "ib0"}, "x") == \
        "socket interface: the job's own GLOO_SOCKET_IFNAME=ib0 NCCL_SOCKET_IFNAME=ib0"
    assert LaunchSpec(script="t.py").socket_ifname == "auto"


@pytest.mark.parametrize("value", ["eth0 ib0", "../x", "", "a;b"])
def test_launch_refuses_what_is_no_interface_name(value: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "doctor", "launch", f"--socket-ifname={value}", "--", "t.py"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"gpu-doctor: error: argument --socket-ifname: {value!r} is not an interface name (auto, off, "
        "or e.g. eth0)"], done.stderr


def test_a_refused_connection_says_so_and_names_the_port() -> None:
    import socket

    with socket.socket() as s:      # bound, not listening: the kernel refuses connections to it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert reachable("127.0.0.1", port) == (False, REFUSED.format(port=port))
    assert f"port {port}" in REFUSED.format(port=port) and f"port {port}" in SILENCE.format(port=port)


# -- a node of its own: network + UTS namespace ------------------------------------------------

NODE = r"""
set -e
ip link set lo up
for dev in mgmt0:192.168.7.12 ib0:10.40.0.12; do   # veth pairs: the peer end stays unused
  ip link add "${dev%%:*}" type veth peer name "${dev%%:*}p"
  ip addr add "${dev#*:}/24" dev "${dev%%:*}"
  ip link set "${dev%%:*}p" up && ip link set "${dev%%:*}" up
done
hostname "$1"
exec "$2" -c "$3" "$4"
"""
PROBE = textwrap.dedent("""
    import json, sys
    from doctor.launch import ifname
    r = ifname.inspect(sys.argv[1])
    print(json.dumps({"interface": r.interface, "source": r.source, "resolved": r.resolved,
                      "problem": r.problem(), "choice": ifname.choose({"MASTER_ADDR": sys.argv[1]}, "auto",
                                                                      "rank 1 on " + r.hostname).line}))
""")


def in_own_node(hostname: str, master: str) -> dict[str, object]:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("unshare or ip missing")
    probe = subprocess.run(["unshare", "--net", "--uts", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create network/UTS namespaces here: {probe.stderr.strip()}")
    done = subprocess.run(["unshare", "--net", "--uts", "sh", "-c", NODE, "node", hostname, sys.executable,
                           PROBE, master], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_in_a_node_whose_name_does_not_resolve_the_route_finds_ib0_and_the_hostname_is_blamed() -> None:
    got = in_own_node("gpu-nowhere-012", "10.40.0.11")
    assert (got["interface"], got["source"], got["resolved"]) == ("ib0", "10.40.0.12", [])
    assert got["problem"] == ("hostname gpu-nowhere-012 does not resolve: gloo binds to 127.0.0.1 (its "
                              "fallback), which the other nodes cannot reach; 10.40.0.11 is reached through ib0 "
                              "(10.40.0.12)")
    assert str(got["choice"]).startswith("gpu-doctor: socket interface for rank 1 on gpu-nowhere-012: ib0 "
                                         "(the route to 10.40.0.11 leaves from 10.40.0.12): "
                                         "GLOO_SOCKET_IFNAME=ib0 NCCL_SOCKET_IFNAME=ib0; without it: hostname")


def test_in_a_node_named_localhost_the_management_route_is_told_apart() -> None:
    """`localhost` resolves to loopback everywhere; the master on the management network is
    reached through mgmt0, and that is the interface named."""
    got = in_own_node("localhost", "192.168.7.1")
    assert (got["interface"], got["source"]) == ("mgmt0", "192.168.7.12")
    assert "resolve" in str(got["problem"]) and "(loopback)" in str(got["problem"])
    assert "through mgmt0 (192.168.7.12)" in str(got["problem"])


# -- LNC004: the same judgement as a check over a job folder ------------------------------------

TWO_NODES = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
{exports}srun python train.py --epochs 3
"""
TRAIN = "import torch.distributed as dist\ndist.init_process_group('nccl')\n"


def lnc004(tmp_path: Path, script: str, fact: object) -> list[Outcome]:
    root = write_job(tmp_path / "job", {"job.sbatch": script, "train.py": TRAIN})
    return run_check("LNC004", root, {"socket_route": fact}, host="gpu012")


def fact(resolved: tuple[str, ...], addresses: dict[str, tuple[str, ...]] = ADDRS,
         interface: str = "ib0", source: str = "10.40.0.12") -> dict[str, object]:
    return SocketRoute("gpu012", resolved, "10.40.0.11", "10.40.0.11", source, interface, addresses).to_fact() \
        | {"whence": "MASTER_ADDR"}


def test_lnc004_fails_when_gloo_would_bind_to_loopback_and_names_both_sides(tmp_path: Path) -> None:
    [out] = lnc004(tmp_path, TWO_NODES.format(exports=""), fact(("127.0.1.1",)))
    assert out.status == Status.FAIL
    assert out.message.startswith("hostname gpu012 resolves to 127.0.1.1 (loopback): gloo binds to 127.0.1.1")
    assert out.message.endswith("the job sets neither GLOO_SOCKET_IFNAME nor NCCL_SOCKET_IFNAME")
    assert [(e.label, e.file, e.line) for e in out.evidence][:2] == [("launch", "job.sbatch", 5),
                                                                     ("#SBATCH", "job.sbatch", 2)]
    assert "ip route get: 10.40.0.11 (MASTER_ADDR) via ib0 src 10.40.0.12" in \
        [f"{e.label}: {e.text}" for e in out.evidence]
    assert list(out.remedies) == ["socket-ifname"]


@pytest.mark.parametrize("exports, status, words", [
    ("export GLOO_SOCKET_IFNAME=ib0 NCCL_SOCKET_IFNAME=ib0\n", Status.PASS, "the job names the socket interface"),
    ("export NCCL_SOCKET_IFNAME=ib0\n", Status.FAIL, "the job sets no GLOO_SOCKET_IFNAME"),
])
def test_lnc004_reads_the_jobs_own_exports(tmp_path: Path, exports: str, status: Status, words: str) -> None:
    [out] = lnc004(tmp_path, TWO_NODES.format(exports=exports), fact(("127.0.1.1",)))
    assert out.status == status and words in out.message, out.message


def test_lnc004_warns_when_only_nccl_would_take_the_management_network(tmp_path: Path) -> None:
    addrs = {"lo": ("127.0.0.1",), "eno1": ("192.168.7.12",), "eth1": ("10.40.0.12",)}
    [out] = lnc004(tmp_path, TWO_NODES.format(exports=""), fact(("10.40.0.12",), addrs, "eth1"))
    assert out.status == Status.WARN
    assert out.message == ("NCCL picks eno1 (ib* first, then any interface but lo and docker*), but 10.40.0.11 "
                           "is reached through eth1; the job sets no NCCL_SOCKET_IFNAME")


def test_lnc004_passes_for_gpu_doctor_launch_and_skips_on_one_node(tmp_path: Path) -> None:
    launch = TWO_NODES.format(exports="").replace("srun python train.py", "gpu-doctor launch -- train.py")
    [out] = lnc004(tmp_path / "a", launch, fact(("127.0.1.1",)))
    assert out.status == Status.PASS and "gpu-doctor launch sets" in out.message
    [one] = lnc004(tmp_path / "b", TWO_NODES.format(exports="").replace("--nodes=2", "--nodes=1"),
                   fact(("127.0.1.1",)))
    assert one.status == Status.SKIP and one.message.startswith("one node")


def test_lnc004_is_unknown_when_the_probe_failed(tmp_path: Path) -> None:
    [out] = lnc004(tmp_path, TWO_NODES.format(exports=""), ProbeFailure("socket_route", "timeout", "DNS hung"))
    assert out.status == Status.UNKNOWN and "DNS hung" in out.message


def test_lnc004_under_fix_skips_the_node_question(tmp_path: Path) -> None:
    [out] = lnc004(tmp_path, TWO_NODES.format(exports=""),
                   ProbeFailure("socket_route", "error", "not probed: gpu-doctor fix reads the job folder only"))
    assert out.status == Status.SKIP and "gpu-doctor --check-only` on a node of the allocation" in out.message


def test_the_socket_route_probe_runs_only_when_lnc004_needs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a Slurm job the probe asks scontrol for the nodes: a one-node gate run must not start it."""
    import dataclasses

    from doctor import facts as factsmod
    from doctor.case import Case
    from doctor.runner import run_checks

    asked: list[str] = []
    prov = factsmod.provider_for("socket_route")
    assert prov is not None and not prov.eager

    def counting(ctx):  # type: ignore[no-untyped-def]
        asked.append(ctx.case.host)
        return prov.fn(ctx)

    monkeypatch.setitem(factsmod.PROVIDERS, "socket_route", dataclasses.replace(prov, fn=counting))
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text("import torch\n")
    env = {"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1"}
    (job / "job.sh").write_text("#!/bin/bash\n#SBATCH --nodes=1\ntorchrun --nproc_per_node=2 train.py\n")
    [one] = [r for r in run_checks(Case(root=job, env=env), ["LNC004"]).results if r.check_id == "LNC004"]
    assert one.status.value == "skip" and asked == []
    (job / "job.sh").write_text("#!/bin/bash\n#SBATCH --nodes=2\ntorchrun --nnodes=2 --nproc_per_node=2 train.py\n")
    run_checks(Case(root=job, env=env), ["LNC004"])
    assert len(asked) == 1
