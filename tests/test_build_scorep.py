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


def run(vendor: Path, venv: Path, *flags: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, VENDOR=str(vendor), CACHE=str(venv.parent / "cache"))
    if path is not None:
        env["PATH"] = path
    return subprocess.run(["bash", str(SCRIPT), *flags, str(venv)], env=env, capture_output=True, text=True,
                          timeout=60)


def stand_in_scorep(prefix: Path) -> Path:
    """A Score-P prefix whose scorep-config and scorep-info answer (a site's module, as the script sees it)."""
    for tool, text in (("scorep-config", "echo 8.4"), ("scorep-info", "echo 'CUDA support: no'")):
        path = prefix / "bin" / tool
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\n{text}\n")
        path.chmod(0o755)
    return prefix


def venv_with_recording_pip(tmp_path: Path) -> Path:
    """A venv whose pip records the scorep-config it would build against and installs a stand-in `scorep`."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    site = venv / "site"
    (venv / "bin" / "python").write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    (venv / "bin" / "pip").write_text(
        f"#!/bin/sh\necho \"$* with $(command -v scorep-config)\" >> {venv}/pip.log\n"
        f"mkdir -p {site}/scorep && touch {site}/scorep/__init__.py\n")
    for tool in ("python", "pip"):
        (venv / "bin" / tool).chmod(0o755)
    return venv


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
    res = run(tmp_path / "no-vendor", venv, path="/usr/bin:/bin")
    assert res.returncode == 0
    assert "and no Score-P on PATH: real-Score-P tests will skip" in res.stdout
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


def test_without_vendored_files_the_score_p_on_path_gets_the_bindings(tmp_path: Path) -> None:
    """A fresh clone (no ../shared/vendor) where a site's Score-P is on PATH: the bindings are built
    against it and it is registered in VENV/scorep-prefix."""
    prefix = stand_in_scorep(tmp_path / "site-scorep")
    venv = venv_with_recording_pip(tmp_path)
    res = run(tmp_path / "no-vendor", venv, path=f"{prefix}/bin:/usr/bin:/bin")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "using the Score-P already installed" in res.stdout
    assert f"build-scorep: Score-P 8.4 at {prefix}\n" in res.stdout
    assert f"scorep==4.5.1 with {prefix}/bin/scorep-config" in (venv / "pip.log").read_text()
    assert (venv / "scorep-prefix").read_text() == f"{prefix}\n"


def test_a_registered_working_score_p_stays_registered(tmp_path: Path) -> None:
    """No vendored files and nothing on PATH: the prefix VENV/scorep-prefix names still works, so it is
    kept (and used), not deleted."""
    prefix = stand_in_scorep(tmp_path / "registered")
    venv = venv_with_recording_pip(tmp_path)
    (venv / "scorep-prefix").write_text(f"{prefix}\n")
    res = run(tmp_path / "no-vendor", venv, path="/usr/bin:/bin")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (venv / "scorep-prefix").read_text() == f"{prefix}\n"
    assert f"scorep-prefix -> {prefix}" in res.stdout


def test_use_existing_skips_the_vendored_build_and_says_when_there_is_none(tmp_path: Path) -> None:
    prefix = stand_in_scorep(tmp_path / "module")
    venv = venv_with_recording_pip(tmp_path)
    vendor = tmp_path / "vendor"  # a tampered tarball: --use-existing never looks at it
    vendor.mkdir()
    (vendor / "scorep-8.4.tar.gz").write_bytes(b"x")
    (vendor / "SHA256SUMS").write_text("0  scorep-8.4.tar.gz\n")
    res = run(vendor, venv, "--use-existing", path=f"{prefix}/bin:/usr/bin:/bin")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (venv / "scorep-prefix").read_text() == f"{prefix}\n"
    res = run(vendor, venv_with_recording_pip(tmp_path / "other"), "--use-existing", path="/usr/bin:/bin")
    assert res.returncode == 1
    assert "--use-existing: no working scorep-config on PATH" in res.stdout
