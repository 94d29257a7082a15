"""P2P001/P2P002 against the fake NVIDIA libraries (real pynvml, ctypes on the fake libcudart)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fakes.node import hung_pids, pid_alive
from gate_util import run_gate

from checks.interconnect import peer_access_matrix, peer_copy_integrity
from doctor.case import Case
from doctor.facts import Facts
from doctor.model import Status


def facts(env: dict[str, str], budget: float = 30.0, **case: Any) -> Facts:
    return Facts(Case(env=env, python=sys.executable, **case), time.monotonic() + budget)


def as_list(result: Any) -> list:
    return result if isinstance(result, list) else [result]


def matrix_rows(outcome: Any) -> dict[str, list[str]]:
    """The rendered matrix as {row head: [cells]} (cells are 'CODE LINK' pairs or '-')."""
    rows = {}
    for line in outcome.data["matrix"].splitlines()[1:-1]:
        head, *rest = line.split()
        cells, i = [], 0
        while i < len(rest):
            cells.append(rest[i] if rest[i] == "-" else f"{rest[i]} {rest[i + 1]}")
            i += 1 if rest[i] == "-" else 2
        rows[head] = cells
    return rows


def test_healthy_node_shows_every_pair_ok_over_nvlink(fake_node):
    outcome = peer_access_matrix(facts(fake_node("healthy")))

    assert outcome.status == Status.PASS
    assert outcome.message == "4 GPUs, 12 directed pairs: 12 peer read/write OK (12 over NVLink)"
    assert matrix_rows(outcome)["GPU0"] == ["-", "OK NV", "OK NV", "OK NV"]


def test_unsupported_disabled_and_broken_pairs_show_in_the_matrix(fake_node):
    env = fake_node("healthy", FAKE_P2P="0-1:not_supported,1-2:disabled,2-3:unknown",
                    FAKE_TOPOLOGY="0-1:system")

    outcomes = as_list(peer_access_matrix(facts(env)))

    rows = matrix_rows(outcomes[0])
    assert rows["GPU0"] == ["-", "NS SYS", "OK NV", "OK NV"]
    assert rows["GPU1"] == ["NS SYS", "-", "DIS NODE", "OK NV"]
    assert rows["GPU2"] == ["OK NV", "DIS NODE", "-", "X NODE"]
    by_pair = {(o.status, tuple(o.entities["pair"])) for o in outcomes}
    assert by_pair == {(Status.FAIL, (2, 3)), (Status.FAIL, (3, 2)),
                       (Status.WARN, (1, 2)), (Status.WARN, (2, 1))}
    broken = next(o for o in outcomes if o.entities["pair"] == [2, 3])
    assert "GPU2->GPU3 is broken/unknown (read unknown, write unknown)" in broken.message
    assert "p2p-exclude-node" in broken.remedies
    assert str(broken.evidence[0]) == ("nvmlDeviceGetP2PStatus: GPU2->GPU3: read unknown, write unknown, "
                                       "NVLink no, topology NODE")
    assert outcomes[0].data["pairs"][0] == {"src": 0, "dst": 1, "cell": "NS", "link": "SYS",
                                            "read": "not supported", "write": "not supported",
                                            "nvlink": False, "topology": "SYS"}


def test_unknown_status_on_every_pair_is_unknown_not_a_node_failure(fake_node):
    env = fake_node("healthy", FAKE_GPU_COUNT="2", FAKE_P2P="0-1:unknown")

    outcome = peer_access_matrix(facts(env))

    assert outcome.status == Status.UNKNOWN and "no usable P2P status for any GPU pair" in outcome.message


@pytest.mark.parametrize("scenario, knobs, reason", [
    ("driver_not_loaded", {}, "no NVIDIA driver to ask: nvmlInit: Driver Not Loaded"),
    ("no_driver", {}, "no NVIDIA driver to ask: nvmlInit: NVML Shared Library Not Found"),
    ("healthy", {"FAKE_GPU_COUNT": "1"}, "1 GPU (NVIDIA H100 80GB HBM3): no peer pairs to check"),
])
def test_no_driver_or_one_gpu_skips_with_the_reason(fake_node, scenario, knobs, reason):
    outcome = peer_access_matrix(facts(fake_node(scenario, **knobs)))

    assert (outcome.status, outcome.message) == (Status.SKIP, reason)


def test_a_hung_nvml_is_a_timeout_of_the_probe(fake_node):
    value = facts(fake_node("nvml_hang"), budget=1.0).get("p2p_matrix")

    assert value.kind == "timeout" and "NVML P2P query hung" in value.detail


def test_corrupting_pair_is_found_by_the_active_test_while_nvml_says_ok(fake_node):
    env = fake_node("p2p_corrupt", GPU_DOCTOR_P2P_BACKEND="cudart")  # FAKE_P2P=2-3:corrupt
    f = facts(env, level=2, options={"p2p_size": 1 << 20})

    assert peer_access_matrix(f).status == Status.PASS
    outcomes = as_list(peer_copy_integrity(f))

    bad = [o for o in outcomes if o.status == Status.FAIL]
    assert sorted(o.entities["pair"] for o in bad) == [[2, 3], [3, 2]]
    # The fake flips one byte in the middle of every copy between 2 and 3.
    assert bad[0].message == ("GPU2->GPU3 corrupts peer copies: 1 of 131072 elements differ from the "
                              "host-staged copy in 4 of 4 copies (first at byte offsets 0x80000)")
    assert "4 bits flipped" in str(bad[0].evidence[0])
    verified = next(o for o in outcomes if o.status == Status.PASS)
    assert verified.message.startswith("10 directions copied 1 MiB x2 bit-exact")
    assert "BAD 1" in bad[0].data["matrix"]


def test_pairs_without_peer_access_are_reported_not_tested(fake_node):
    env = fake_node("healthy", FAKE_GPU_COUNT="3", FAKE_P2P="0-2:not_supported",
                    GPU_DOCTOR_P2P_BACKEND="cudart")

    outcomes = as_list(peer_copy_integrity(facts(env, level=2, options={"p2p_size": 65536})))

    assert [o.status for o in outcomes] == [Status.PASS]
    assert outcomes[0].message.endswith("; 2 without peer access, not tested: GPU0->GPU2, GPU2->GPU0")
    assert "NPA" in outcomes[0].data["matrix"]


@pytest.mark.slow
def test_a_hung_peer_copy_is_killed_and_named(fake_node):
    env = fake_node("healthy", FAKE_P2P="0-1:hang", GPU_DOCTOR_P2P_BACKEND="cudart")

    outcomes = as_list(peer_copy_integrity(facts(env, budget=3.0, level=2, options={"p2p_size": 65536})))

    assert [o.status for o in outcomes] == [Status.TIMEOUT]
    assert outcomes[0].message.startswith("the peer copy GPU0->GPU1 hung; killed after")
    assert outcomes[0].entities == {"pair": [0, 1]}
    pids = hung_pids(env)
    assert pids and not any(pid_alive(p) for p in pids)


@pytest.mark.slow
def test_without_cuda_in_torch_the_test_falls_back_to_the_cuda_runtime(fake_node):
    pytest.importorskip("torch")
    env = fake_node("p2p_corrupt")

    value = facts(env, level=2, options={"p2p_size": 65536}).get("p2p_integrity")

    assert value["backend"] == "cudart"
    assert [d["status"] for d in value["directions"]].count("corrupt") == 2


def test_gate_runs_the_active_test_with_the_p2p_playbook_only_when_asked(fake_node, tmp_path: Path):
    env = fake_node("p2p_corrupt", GPU_DOCTOR_P2P_BACKEND="cudart", GPU_DOCTOR_P2P_SIZE="64K")

    p2p = run_gate(env, "--playbook", "p2p", "--level", "2", tmp_path=tmp_path)
    prologue = run_gate(env, "--playbook", "prologue", tmp_path=tmp_path)

    assert p2p.rc == 1 and p2p.status("P2P002") == "fail"
    assert "P2P002 fail: GPU2->GPU3 corrupts peer copies" in p2p.stdout
    assert "GB/s" in p2p.stderr and "BAD 1" in p2p.stderr  # the matrix under the progress line
    assert [f["entities"]["pair"] for f in p2p.check("P2P002")["findings"] if f["status"] == "fail"] \
        == [[2, 3], [3, 2]]
    assert prologue.rc == 0 and prologue.status("P2P001") == "pass"
    assert "P2P002" not in [c["id"] for c in prologue.doc["checks"]]


@pytest.mark.slow
def test_level_2_adds_the_active_test_to_the_prologue(fake_node, tmp_path: Path):
    env = fake_node("p2p_corrupt", GPU_DOCTOR_P2P_BACKEND="cudart", GPU_DOCTOR_P2P_SIZE="64K")

    run = run_gate(env, "--playbook", "prologue", "--level", "2", tmp_path=tmp_path)

    assert run.rc == 1 and run.status("P2P002") == "fail"


BENCH = Path(__file__).resolve().parent.parent / "bench" / "gpu_p2p_check.py"


def test_bench_script_names_the_corrupt_pair_and_exits_1(fake_node):
    env = fake_node("p2p_corrupt")

    proc = subprocess.run([sys.executable, str(BENCH), "--backend", "cudart", "--size", "64K"],
                          env=env, capture_output=True, text=True, timeout=60)

    assert proc.returncode == 1, proc.stderr
    assert "GPU2->GPU3: corrupt: 1 of 8192 elements differ in 6 of 6 copies" in proc.stdout
    assert "GPU3->GPU2: corrupt" in proc.stdout and "GPU0->GPU1: corrupt" not in proc.stdout
    assert proc.stdout.rstrip().endswith("CORRUPTION or copy errors on 2 direction(s)")


def test_bench_script_skips_cleanly_without_cuda(fake_node):
    proc = subprocess.run([sys.executable, str(BENCH), "--backend", "cudart"],
                          env=fake_node("no_driver"), capture_output=True, text=True, timeout=60)

    assert proc.returncode == 0
    assert proc.stdout.startswith("skipped: no CUDA here (cudaGetDeviceCount: error 35")
