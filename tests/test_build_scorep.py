"""scripts/build-scorep.sh refuses vendored files whose hash does not match, and says when nothing is vendored.

(The install itself, and its reuse, run in tests/test_scorep_real.py with real Score-P.)
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "build-scorep.sh"


def run(vendor: Path, venv: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, VENDOR=str(vendor), CACHE=str(venv.parent / "cache"))
    return subprocess.run(["bash", str(SCRIPT), str(venv)], env=env, capture_output=True, text=True, timeout=60)


def fake_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    return venv


def test_a_tampered_source_tarball_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / "scorep-8.4.tar.gz").write_bytes(b"not the release")
    good = hashlib.sha256(b"the release").hexdigest()
    (vendor / "SHA256SUMS").write_text(f"{good}  scorep-8.4.tar.gz\n")
    venv = fake_venv(tmp_path)
    res = run(vendor, venv)
    assert res.returncode == 1
    got = hashlib.sha256(b"not the release").hexdigest()
    assert f"{vendor}/scorep-8.4.tar.gz: sha256 {got}, SHA256SUMS says {good}" in res.stdout
    assert not (tmp_path / "cache").exists() and not (venv / "scorep-prefix").exists()


def test_nothing_vendored_means_the_real_score_p_tests_skip(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path)
    (venv / "scorep-prefix").write_text("/opt/old\n")
    res = run(tmp_path / "no-vendor", venv)
    assert res.returncode == 0
    assert "real-Score-P tests will skip" in res.stdout
    assert not (venv / "scorep-prefix").exists()


def test_a_finished_source_build_is_reused_from_the_cache_keyed_by_the_hash(tmp_path: Path) -> None:
    """Without the prebuilt prefix for this OS, the script builds from source into CACHE/scorep-8.4-<hash>;
    a build marked complete whose scorep-config runs is taken as it is (here: a stand-in prefix)."""
    real = Path(__file__).resolve().parent.parent.parent / "shared" / "vendor" / "scorep-8.4.tar.gz"
    if not real.is_file():
        import pytest

        pytest.skip(f"{real} is not vendored here")
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / "scorep-8.4.tar.gz").symlink_to(real)
    digest = hashlib.sha256(real.read_bytes()).hexdigest()
    (vendor / "SHA256SUMS").write_text(f"{digest}  scorep-8.4.tar.gz\n")   # no prebuilt prefix listed
    build = tmp_path / "cache" / f"scorep-8.4-{digest[:16]}"
    for tool, text in (("scorep-config", "echo 8.4"), ("scorep-info", "echo 'CUDA support: no'")):
        path = build / "prefix" / "bin" / tool
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\n{text}\n")
        path.chmod(0o755)
    (build / ".complete").touch()
    res = run(vendor, fake_venv(tmp_path))
    assert f"build-scorep: reusing the finished build in {build}\n" in res.stdout, res.stdout + res.stderr
    assert f"build-scorep: Score-P 8.4 at {build}/prefix\n" in res.stdout
    assert "building Score-P 8.4" not in res.stdout
