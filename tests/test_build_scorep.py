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
