"""The bundled examples as the repository ships them, never as using them left them.

The README's app steps write into an example (`.gpu-doctor/`, `gpu-doctor-report.html`, what a
launch leaves: `out/`, `scorep_rank_N/`), and a test reading the working tree's example would then
check another job. `EXAMPLES` is a copy of the shipped files (the files git tracks, in a checkout;
elsewhere every file but gpu-doctor's own state), made once per test process in a temporary
folder; `copy_example` copies one of them for a test that changes it.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
APP_STATE = (".gpu-doctor", "gpu-doctor-report*.html")


def shipped(folder: Path) -> list[Path] | None:
    """The files git tracks under `folder` (relative to it), or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(folder), "ls-files", "-z", "--", "."], capture_output=True,
                             timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [Path(p.decode()) for p in out.split(b"\0") if p] or None


def copy_shipped(src: Path, dst: Path) -> Path:
    """Copy what `src` ships to `dst` (which must not exist); return `dst`."""
    files = shipped(src)
    if files is None:
        shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns(*APP_STATE))
        return dst
    dst.mkdir(parents=True)
    for rel in files:
        source = src / rel
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dst / rel, follow_symlinks=False)
    return dst


def _pristine() -> Path:
    base = Path(tempfile.mkdtemp(prefix="gpu-doctor-examples-"))
    atexit.register(shutil.rmtree, base, True)
    return copy_shipped(REPO / "examples", base / "examples")


EXAMPLES = _pristine()


def copy_example(name: str, dst: Path) -> Path:
    """A copy of the shipped example `name` at `dst`, for a test that changes it: taken from what git
    ships, not from `EXAMPLES`, which tests that run the app or a launch on it may have written into."""
    return copy_shipped(REPO / "examples" / name, dst)
