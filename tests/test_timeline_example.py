"""A newcomer without Score-P can try `timeline`: the README's first lines point at a real
2-rank Score-P measurement under examples/, and `gpu-doctor timeline` on it prints a breakdown."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from examples_util import EXAMPLES

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = EXAMPLES / "scorep-ddp-trace"


def test_the_readme_opens_with_the_timeline_example() -> None:
    first = REPO.joinpath("README.md").read_text(encoding="utf-8").split("\n```\n", 1)[0]
    assert "gpu-doctor timeline examples/scorep-ddp-trace" in first  # in the first code block


def test_timeline_on_the_bundled_measurement_prints_a_breakdown() -> None:
    assert (EXAMPLE / "scorep_rank_0" / "traces.otf2").is_file()
    proc = subprocess.run([sys.executable, "-m", "doctor", "timeline", "examples/scorep-ddp-trace"],
                          capture_output=True, text=True, timeout=120, cwd=EXAMPLES.parent, env=None)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Run scorep-ddp-trace: 2 ranks, from traces" in out
    # A CPU run (no CUDA recorded): not a table of GPU zeros, but where the CPU time went.
    assert "CPU time per rank (no GPU streams: exclusive time of the regions on the CPU threads)" in out
    for rank in ("0", "1"):  # one row per measured rank: its wall time, its 3 train_steps, the top regions
        assert re.search(rf"^│ {rank}\s+│\s+\d+\.\d+ s │\s+3 │\s+[\d.]+ ms │.*__main__:main [\d.]+ s", out, re.M), out
    assert "GPU busy 0.0 %" not in out and "exposed" not in out
    assert "hint: no GPU streams: measure CUDA with `python -m scorep --cuda`" in out
    assert "SCOREP_ENABLE_TRACING=true" in out
    # the progress line counts the records it read, not the GPU events it did not find
    assert re.search(r"\[\d/2\] scorep_rank_0: [1-9]\d* events, (C|Python) reader", proc.stderr), proc.stderr
