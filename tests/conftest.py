"""Shared fixtures. `fake_node` gives the environment of a fake GPU node (see
tests/fakes/node.py for the scenarios and knobs):

    def test_something(fake_node):
        env = fake_node("transient_802", FAKE_CUDART_FAIL_FIRST=3)
        subprocess.run([sys.executable, "-m", "doctor", "--check-only"], env=env)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakes.node import build_fakes, scenario_env  # noqa: E402


@pytest.fixture(scope="session")
def fake_libs() -> Path:
    """The folder of compiled fake NVIDIA libraries (skips the test where gcc is missing)."""
    try:
        return build_fakes()
    except RuntimeError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def fake_node(tmp_path: Path, fake_libs: Path) -> Callable[..., dict[str, str]]:
    """A factory: fake_node(scenario="healthy", **knobs) -> a full environment."""

    def make(scenario: str = "healthy", **knobs: Any) -> dict[str, str]:
        return scenario_env(scenario, tmp_path, **knobs)

    return make


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The fuzz suite's counts (tests/test_fuzz.py), when it ran: every count but `runs` must be 0."""
    counts = sys.modules.get("fuzz_counts")
    if counts is not None and counts.COUNTS["runs"]:
        terminalreporter.write_line("fuzz: " + ", ".join(f"{k} {counts.COUNTS[k]}" for k in counts.KEYS))
