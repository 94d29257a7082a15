"""`--check-only --prometheus FILE`: the verdict for node_exporter's textfile collector, read back
with prometheus_client's own parser; replaced atomically; and the Prolog's PROMETHEUS_FILE."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from slurm_util import PROLOG_SH, PrologSetup

from doctor import prometheus

STATES = ("pass", "warn", "fail", "skip", "unknown", "timeout")


def gate(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "doctor", "--check-only", "--timeout", "3", "--quiet", *args],
                          env=env, capture_output=True, text=True, timeout=60)


def families(path: Path) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(path.read_text()):
        out[fam.name] = [(s.labels, s.value) for s in fam.samples]
    return out


def test_the_verdict_as_prometheus_state_sets(fake_node, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prom = tmp_path / "textfile" / "gpu_doctor.prom"
    done = gate(fake_node("permanent_802"), "--prometheus", str(prom), "--json-file", str(tmp_path / "v.json"))
    assert done.returncode == 1, done.stderr
    doc = json.loads((tmp_path / "v.json").read_text())
    got = families(prom)
    status = got["gpu_doctor_check_status"]
    assert len(status) == len(doc["checks"]) * len(STATES)
    current = {(s["check"], s["layer"]): s["status"] for s, v in status if v == 1}
    assert current == {(c["id"], c["layer"]): c["status"] for c in doc["checks"]}
    assert current[("GPU003", "node")] == "fail" and current[("GPU001", "node")] == "pass"
    assert all(v in (0, 1) for _, v in status)
    assert got["gpu_doctor_exit_code"] == [({}, 1.0)]
    (_, stamp), = got["gpu_doctor_last_run_timestamp_seconds"]
    assert abs(stamp - time.time()) < 120
    durations = dict((s["check"], v) for s, v in got["gpu_doctor_check_duration_seconds"])
    assert set(durations) == {c["id"] for c in doc["checks"]} and durations["GPU003"] > 0.5
    text = prom.read_text()
    for name in ("gpu_doctor_check_status", "gpu_doctor_exit_code", "gpu_doctor_last_run_timestamp_seconds",
                 "gpu_doctor_check_duration_seconds"):
        assert f"# HELP {name} " in text and f"# TYPE {name} gauge" in text
    assert prom.stat().st_mode & 0o777 == 0o644      # node_exporter reads it as its own user


def test_a_scrape_during_a_run_sees_the_previous_file_whole(fake_node, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prom = tmp_path / "gpu_doctor.prom"
    assert gate(fake_node("healthy"), "--prometheus", str(prom)).returncode == 0
    before = prom.read_text()
    seen: set[str] = set()
    stop = threading.Event()

    def scrape() -> None:
        while not stop.is_set():
            seen.add(prom.read_text())
            time.sleep(0.01)

    reader = threading.Thread(target=scrape)
    reader.start()
    try:   # a failing node: GPU003 retries for the whole budget, the scrapes go on meanwhile
        done = gate(fake_node("permanent_802"), "--prometheus", str(prom))
    finally:
        stop.set()
        reader.join()
    assert done.returncode == 1
    after = prom.read_text()
    assert seen <= {before, after} and before in seen
    assert "gpu_doctor_exit_code 1" in after and "gpu_doctor_exit_code 0" in before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []   # no temp file left


def test_a_write_that_fails_keeps_the_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prom = tmp_path / "gpu_doctor.prom"
    prom.write_text("previous\n")
    doc = {"run": {"start": "2026-12-01T10:00:00+00:00", "duration_s": 1.0}, "exit_code": 0,
           "checks": [{"id": "GPU001", "layer": "node", "status": "pass", "duration_ms": 3}]}

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        prometheus.write_prometheus(prom, doc)
    assert prom.read_text() == "previous\n" and sorted(p.name for p in tmp_path.iterdir()) == ["gpu_doctor.prom"]


def test_label_values_are_escaped() -> None:
    doc = {"run": {"start": "2026-12-01T10:00:00+00:00", "duration_s": 0.5}, "exit_code": 0,
           "checks": [{"id": 'X"1\\\n', "layer": "node", "status": "pass", "duration_ms": 1}]}
    fams = {f.name: f for f in text_string_to_metric_families(prometheus.exposition(doc))}
    assert {s.labels["check"] for s in fams["gpu_doctor_check_status"].samples} == {'X"1\\\n'}


def test_an_unwritable_target_is_one_line(fake_node, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    os.mkfifo(tmp_path / "fifo.prom")
    done = gate(fake_node("healthy"), "--prometheus", str(tmp_path / "fifo.prom"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("gpu-doctor: error: --prometheus: cannot write "), done.stderr


def test_the_prolog_writes_prometheus_file_and_keeps_each_nodes_verdict(tmp_path: Path) -> None:
    try:
        setup = PrologSetup(tmp_path / "prolog", timeout=3).install()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    prom = tmp_path / "textfile" / "gpu_doctor.prom"

    def prolog(job: str, scenario: str) -> int:
        setup.configure(scenario)
        with setup.conf.open("a") as fh:
            fh.write(f"PROMETHEUS_FILE={prom}\n")
        env = {"SLURM_JOB_ID": job, "SLURMD_NODENAME": "gpu17", "GPU_DOCTOR_PROLOG_CONF": str(setup.conf)}
        return subprocess.run(["/bin/sh", str(PROLOG_SH)], env=env, capture_output=True, timeout=60).returncode

    assert prolog("41", "healthy") == 0
    assert "gpu_doctor_exit_code 0" in prom.read_text()
    assert prolog("42", "permanent_802") == 1
    assert "gpu_doctor_exit_code 1" in prom.read_text()
    assert sorted(p.name for p in setup.verdicts.glob("job-*.json")) == [
        "job-41.gpu17.json", "job-41.json", "job-42.gpu17.json", "job-42.json"]
    done = subprocess.run([sys.executable, "-m", "doctor", "fleet", str(setup.verdicts), "--json", "--no-sinfo"],
                          capture_output=True, text=True, timeout=60)
    doc = json.loads(done.stdout)
    assert doc["read"]["verdicts"] == 2 and doc["read"]["duplicates"] == 3   # job-N.json and node-*.json copies
    assert [f["checks"] for f in doc["failing_now"]] == [["GPU003"]]
