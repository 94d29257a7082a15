"""Reports on real node states: this host as it is, and the fake GPU nodes (C fakes at the ABI boundary).

Each runs `python -m doctor report` in a subprocess with the scenario's
environment, so the probes load the fake libraries exactly as they would the
real ones. The job's interpreter is a wrapper that cannot import torch, which
keeps the framework probe fast and its answer fixed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from report_util import no_torch_python, report_validator

REPO = Path(__file__).resolve().parent.parent


def report(tmp_path: Path, env: dict[str, str] | None, name: str = "r.json", *extra: str) -> tuple[int, str]:
    out = tmp_path / name
    proc = subprocess.run(
        [sys.executable, "-m", "doctor", "report", "-o", str(out), "--python", str(no_torch_python(tmp_path)),
         "--timeout", "30", "-q", *extra],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.startswith(f"gpu-doctor: wrote {out}")
    return proc.returncode, out.read_text()


def versions(doc: dict[str, Any]) -> dict[str, str | None]:
    return {v["name"]: v["value"] or v["note"] for v in doc["versions"]}


def test_report_on_this_host_as_it_is(tmp_path: Path) -> None:
    _, text = report(tmp_path, None)
    doc = json.loads(text)
    report_validator().validate(doc)
    v = versions(doc)
    assert v["torch"] is not None and v["torch"].startswith("N/A (torch not importable")
    if not doc["gpus"]:  # no driver here (CI, development machines): every node fact says why
        assert doc["gpus_note"].startswith("N/A (")
        assert v["NVIDIA driver"].startswith("N/A (")


def test_report_on_a_node_without_driver(tmp_path: Path, fake_node: Callable[..., dict[str, str]]) -> None:
    code, text = report(tmp_path, fake_node("no_driver"))
    doc = json.loads(text)
    report_validator().validate(doc)
    v = versions(doc)
    assert v["NVIDIA driver"].startswith("N/A (driver not loaded: ") and "Not Found" in v["NVIDIA driver"]
    assert v["CUDA driver init"].startswith("libcuda not loaded")
    assert doc["gpus"] == [] and doc["gpus_note"].startswith("N/A (driver not loaded")
    assert doc["topology"]["available"] is False and doc["topology"]["note"].startswith("N/A (")


def test_report_on_a_healthy_four_gpu_node(tmp_path: Path, fake_node: Callable[..., dict[str, str]]) -> None:
    env = fake_node("healthy")
    _, text = report(tmp_path, env)
    doc = json.loads(text)
    report_validator().validate(doc)
    v = versions(doc)
    assert (v["NVIDIA driver"], v["CUDA driver API"], v["CUDA runtime"]) == ("550.54.15", "12.4", "12.4")
    assert v["CUDA driver init"] == "ok, 4 devices" and v["CUDA runtime state"] == "ready at attempt 1 of 1"
    assert [g["name"] for g in doc["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 4
    assert all(re.fullmatch(r"GPU-[0-9a-f]{10}", g["uuid"]) for g in doc["gpus"])
    assert len({g["uuid"] for g in doc["gpus"]}) == 4
    assert doc["gpus"][0]["memory"] == "79.6 GiB" and doc["gpus"][0]["pci_bus_id"]
    assert doc["topology"]["labels"] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert {c for row in doc["topology"]["rows"] for c in row} == {"-", "OK NV"}
    assert not re.search(r"GPU-[0-9a-f]{8}-", text)  # no raw UUID anywhere


def test_report_names_a_broken_p2p_pair(tmp_path: Path, fake_node: Callable[..., dict[str, str]]) -> None:
    _, text = report(tmp_path, fake_node("p2p_unsupported"), "r.md")
    assert re.search(r"^\| GPU0 \| - \| NS \w+ \| OK NV \| OK NV \|$", text, re.M)
    assert "## Topology and P2P" in text


@pytest.mark.slow
def test_report_shows_a_runtime_that_was_not_ready_at_first(
        tmp_path: Path, fake_node: Callable[..., dict[str, str]]) -> None:
    code, text = report(tmp_path, fake_node("transient_802"))
    doc = json.loads(text)
    assert versions(doc)["CUDA runtime state"] == "ready at attempt 3 of 3"
    gpu003 = next(c for c in doc["checks"] if c["id"] == "GPU003")
    assert gpu003["status"] != "pass" and "802" in gpu003["message"]


def test_report_on_a_node_whose_driver_is_not_loaded(tmp_path: Path,
                                                      fake_node: Callable[..., dict[str, str]]) -> None:
    _, text = report(tmp_path, fake_node("driver_not_loaded"), "r.html")
    assert re.search(r"N/A \(driver not loaded: [^)]*Driver Not Loaded\)", text)
    assert "100 cudaErrorNoDevice" in text
