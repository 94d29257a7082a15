"""The app in a real terminal: `gpu-doctor examples/scorep-ddp-broken` in tmux, driven with
send-keys, read with capture-pane, as a newcomer would use it (issue 17).

It runs in a copy of the example (the fix flow writes files), on a private tmux server that the
test starts and kills. Every key waits for what it must change on the screen before the next
one goes: nothing waits a fixed time, and each wait has a ceiling only a broken app reaches.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from examples_util import EXAMPLES

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = EXAMPLES / "scorep-ddp-broken"

CEILING_S = 240.0  # a quiet machine needs a few seconds for the slowest step
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="tmux is not installed (Debian: apt-get install tmux; .ci/run does)")


class Terminal:
    """One tmux session on a private server: keys in, screen text out."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def tmux(self, *args: str) -> str:
        proc = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args], capture_output=True,
                              text=True, timeout=20)
        assert proc.returncode == 0, f"tmux {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "app")

    def key(self, key: str) -> None:
        """One key. The caller then waits for its effect: an Escape followed at once by a letter
        would reach the app as one alt+letter."""
        self.tmux("send-keys", "-t", "app", key)

    def resize(self, width: int, height: int) -> None:
        self.tmux("resize-window", "-t", "app", "-x", str(width), "-y", str(height))

    def wait(self, predicate: Callable[[str], bool], what: str, timeout: float = CEILING_S) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if predicate(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n{text}")
            time.sleep(0.2)

    def wait_for(self, words: str, timeout: float = CEILING_S) -> str:
        return self.wait(lambda text: words in text, repr(words), timeout)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "scorep-ddp-broken")
    script = Path(sys.executable).with_name("gpu-doctor")
    command = shlex.join([str(script)] if script.exists() else [sys.executable, "-m", "doctor"])
    term = Terminal(f"gpu-doctor-test-{uuid.uuid4().hex[:8]}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}
    subprocess.run(["tmux", "-L", term.socket, "-f", "/dev/null", "new-session", "-d", "-s", "app",
                    "-x", "160", "-y", "45", "-c", str(tmp_path),
                    f"{command} examples/scorep-ddp-broken; echo \"app exited: $?\"; sleep 600"],
                   check=True, env={**env, "TERM": "xterm-256color"}, timeout=20)
    try:
        yield term
    finally:
        subprocess.run(["tmux", "-L", term.socket, "kill-server"], capture_output=True, timeout=20)


def finding_width(screen: str) -> int:
    """How far the check rows reach: the finding column's right edge (0 while none is drawn)."""
    rows = [ln for ln in screen.splitlines() if re.match(r"\s*[a-z]+\s+[A-Z]{3}\d{3}\s", ln)]
    return max((len(row.rstrip()) for row in rows), default=0)


def test_the_app_in_tmux_open_fix_apply_undo_export_resize_quit(terminal: Terminal, tmp_path: Path) -> None:
    t = terminal
    t.wait_for("NOT READY")
    t.key("Enter")  # a finding: its evidence, with the source around file:line
    t.wait_for("Evidence")
    t.key("Escape")
    t.wait_for("NOT READY")

    t.key("f")
    screen = t.wait_for("remedies selected to apply")
    assert re.search(r"▐X▌ \[safe\] cuda-warmup", screen), screen  # the same plan as `gpu-doctor fix`
    assert re.search(r"▐ ▌ \[unsafe\] per-rank-launch", screen), screen  # unselected: an empty box
    offered = screen.split("remedies selected to apply")[0].split()[-1]
    t.key("a")
    t.wait_for("Apply 5 remedies")
    t.key("y")
    screen = t.wait_for("cuda-warmup: verified")
    t.key("u")
    t.wait_for("undone")
    screen = t.wait_for(f"{offered} remedies selected to apply")  # the undone remedies are back, and counted
    assert re.search(r"▐X▌ \[safe\] cuda-warmup", screen), screen

    t.key("Escape")
    t.wait_for("NOT READY")
    t.key("e")
    t.wait_for("Export a redacted report")
    t.key("Enter")
    screen = t.wait(lambda s: "Export a redacted report" not in s and "report written" in s,
                    "the dialog to close and say where the report went")
    assert "gpu-doctor: wrote" not in screen  # nothing printed over the app
    last = screen.rstrip("\n").splitlines()[-1]
    assert "q Quit" in last and "palette" in last  # the footer is intact
    report = tmp_path / "examples" / "scorep-ddp-broken" / "gpu-doctor-report.html"
    assert report.read_text().startswith("<!DOCTYPE html>")

    t.resize(80, 24)
    def footer(screen: str) -> str:
        lines = screen.rstrip("\n").splitlines()
        return lines[-1] if len(lines) <= 24 and "palette" in lines[-1] else ""

    screen = t.wait(lambda s: 0 < finding_width(s) <= 80 and bool(footer(s)), "the app redrawn in 80x24")
    bottom = footer(screen)
    assert "? Help" in bottom and "q Quit" in bottom, bottom  # how to get help and out, in 80 columns
    t.resize(160, 45)
    screen = t.wait(lambda s: finding_width(s) > 140, "the finding column to widen again")

    t.key("q")
    t.wait_for("app exited: ")  # q quits: the app is gone, the shell prints its status
