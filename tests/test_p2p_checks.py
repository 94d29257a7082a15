"""P2P001/P2P002 findings from probe output: skips, timeouts, crashes, refusals, sizes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checks.interconnect import peer_access_matrix, peer_copy_integrity
from doctor.case import Case
from doctor.facts import Facts
from doctor.isolate import Isolated
from doctor.model import Status
from doctor.probes.p2p import interpreter_refusal, parse_size, read_integrity, render_integrity

GPUS = [{"index": i, "name": "NVIDIA H100", "pci_bus_id": f"00000000:{0x18 + 16 * i:02X}:00.0"}
        for i in range(3)]


def facts_with(case: Case | None = None, **values) -> Facts:
    return Facts(case or Case(env={}, level=2), time.monotonic() + 30, preset=values)


def child_run(events: list[dict], *, timed_out=False, returncode=0, stderr="") -> Isolated:
    """How a p2p_child.py run looks to the parent: its streamed JSON lines."""
    stdout = "".join(json.dumps(e) + "\n" for e in events)
    return Isolated(("python", "p2p_child.py"), None if timed_out else returncode, stdout, stderr,
                    7.5, timed_out)


def ok_pair(src: int, dst: int) -> list[dict]:
    obs = {"bad_elements": 0, "bad_copies": 0, "copies": 2, "first_bad": [], "gbps": 40.0, "error": None}
    return [{"event": "begin", "src": src, "dst": dst},
            {"event": "pair", "src": src, "dst": dst, "status": "ok", "forward": obs, "back": obs,
             "bytes": 1 << 20, "iterations": 2, "error": None}]


DEVICES = {"event": "devices", "devices": GPUS, "backend": "torch", "bytes": 1 << 20, "iterations": 2}


def integrity(res: Isolated) -> list:
    value = read_integrity(res)
    value["python"] = "/opt/job/bin/python"
    result = peer_copy_integrity(facts_with(p2p_integrity=value))
    return result if isinstance(result, list) else [result]


def test_a_hung_copy_is_a_timeout_that_names_the_pair_in_progress():
    res = child_run([DEVICES, *ok_pair(0, 1), {"event": "begin", "src": 0, "dst": 2}], timed_out=True)

    outcomes = integrity(res)

    hung = [o for o in outcomes if o.status == Status.TIMEOUT]
    assert len(hung) == 1
    assert "GPU0->GPU2 hung" in hung[0].message and hung[0].entities["pair"] == [0, 2]
    assert "not tested: GPU1->GPU0, GPU1->GPU2, GPU2->GPU0, GPU2->GPU1" in hung[0].message
    assert "HUNG" in render_integrity(read_integrity(res))


def test_a_run_out_of_budget_is_a_timeout_listing_the_untested_pairs():
    res = child_run([DEVICES, *ok_pair(0, 1), {"event": "budget", "untested": [[0, 2], [1, 0]]},
                     {"event": "done", "seconds": 9.0}])

    statuses = {o.status: o for o in integrity(res)}

    assert "time budget ran out" in statuses[Status.TIMEOUT].message
    assert "GPU0->GPU2, GPU1->GPU0" in statuses[Status.TIMEOUT].message
    assert Status.PASS in statuses  # the pair that did finish is reported as verified


def test_a_crash_during_a_copy_is_unknown_and_names_the_pair():
    res = child_run([DEVICES, {"event": "begin", "src": 1, "dst": 2}], returncode=-11,
                    stderr="Segmentation fault")

    (outcome,) = integrity(res)

    assert outcome.status == Status.UNKNOWN
    assert "killed by SIGSEGV" in outcome.message and "GPU1->GPU2" in outcome.message


def test_one_gpu_is_a_skip_with_the_reason():
    res = child_run([{**DEVICES, "devices": GPUS[:1]}, {"event": "done", "seconds": 0.1}])

    (outcome,) = integrity(res)

    assert outcome.status == Status.SKIP
    assert outcome.message == "/opt/job/bin/python sees 1 GPU: no peer pairs to test"


def test_one_gpu_in_the_nvml_matrix_is_a_skip_with_the_reason():
    value = {"driver_loaded": True, "error": None, "gpus": GPUS[:1], "pairs": [], "views": []}

    outcome = peer_access_matrix(facts_with(p2p_matrix=value))

    assert outcome.status == Status.SKIP and "1 GPU (NVIDIA H100): no peer pairs" in outcome.message


def test_torch_without_cuda_is_unknown_not_pass():
    res = child_run([{"event": "error", "error": "torch 2.13.0 cannot use CUDA (built for CUDA None); "
                                                  "CUDA runtime: no CUDA runtime library"}], returncode=3)

    (outcome,) = integrity(res)

    assert outcome.status == Status.UNKNOWN
    assert "could not run in /opt/job/bin/python: torch 2.13.0 cannot use CUDA" in outcome.message


def test_below_level_2_the_active_test_does_not_run():
    case = Case(env={}, level=1, python="/nonexistent/python")
    facts = Facts(case, time.monotonic() + 10)

    outcome = peer_copy_integrity(facts)

    assert outcome.status == Status.SKIP
    assert "--level 2" in outcome.message
    assert facts.get("p2p_integrity") == {"requested": False}


def test_a_missing_interpreter_is_unknown_with_the_reason():
    case = Case(env={}, level=2, python="/nonexistent/python")

    outcome = peer_copy_integrity(Facts(case, time.monotonic() + 10))

    assert outcome.status == Status.UNKNOWN and "cannot start /nonexistent/python" in outcome.message


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_the_gate_as_root_refuses_an_interpreter_in_a_user_writable_folder(tmp_path: Path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    python = shared / "python"
    python.symlink_to(sys.executable)
    case = Case(env={}, level=2, gate=True, python=str(python))

    reason = interpreter_refusal(case)
    outcome = peer_copy_integrity(Facts(case, time.monotonic() + 10))

    assert reason and f"{shared} is owned by uid 0 with mode drwxrwxrwx" in reason
    assert outcome.status == Status.SKIP and outcome.message == reason
    assert interpreter_refusal(Case(env={}, level=2, gate=True, python=sys.executable)) is None


@pytest.mark.parametrize("text, size", [("32M", 32 << 20), ("1G", 1 << 30), ("4096", 4096), ("64MiB", 64 << 20)])
def test_sizes_parse_as_powers_of_1024(text: str, size: int):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["abc", "0", "32T", "-1M"])
def test_bad_sizes_are_rejected(text: str):
    with pytest.raises(ValueError):
        parse_size(text)


def test_a_bad_p2p_size_on_the_command_line_is_one_line_and_exit_2():
    exe = shutil.which("gpu-doctor") or str(Path(sys.executable).parent / "gpu-doctor")
    proc = subprocess.run([exe, "--check-only", "--p2p-size", "lots"], capture_output=True, text=True,
                          timeout=60)

    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "gpu-doctor: error: argument --p2p-size: not a size: 'lots' (use e.g. 32M or 1G)"]
