"""Bad input that gave a one-line *internal* error, or was accepted, before (issue 20): now a user error.

Each is exit 2 with one line on stderr that names the option or the path, never
"internal error" and never a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor.cli import main


def one_user_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert "internal error" not in err and "Traceback" not in err
    return err


@pytest.fixture
def script(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


def test_timeline_on_a_folder_it_may_not_look_into(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_user_error(capsys, ["timeline", "/proc/1"])
    assert "no Score-P experiment folders" in err


@pytest.mark.parametrize("value", ["1e308", "inf", "nan", "-1"])
def test_timeout_out_of_range(capsys: pytest.CaptureFixture[str], value: str) -> None:
    err = one_user_error(capsys, ["--check-only", "--timeout", value])
    assert "--timeout" in err and value in err


def test_max_bundle_mb_speaks_of_mib(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = one_user_error(capsys, ["report", "-o", str(tmp_path / "r.tar.gz"), "--max-bundle-mb", "0"])
    assert "--max-bundle-mb" in err and "MiB" in err and "seconds" not in err


@pytest.mark.parametrize("argv, needle", [
    (["--run-dir", "/etc/hostname"], "--run-dir '/etc/hostname' exists and is not a folder"),
    (["--master-addr", "not a host"], "'not a host' is neither an IP address nor a host name"),
    (["--master-port", "70000"], "a TCP port is 1-65535"),
    (["--master-port", "0"], "a TCP port is 1-65535"),
    (["--nproc", "100000000000"], "this node holds at most"),
])
def test_launch_rejects(capsys: pytest.CaptureFixture[str], script: Path, argv: list[str], needle: str) -> None:
    err = one_user_error(capsys, ["launch", "--workdir", str(script), "--no-warmup", *argv, "--", "train.py"])
    assert needle in err
