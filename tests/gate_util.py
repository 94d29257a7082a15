"""Run the real gate CLI in a subprocess and read its verdict (node and gate tests)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "doctor" / "schemas" / "gate.schema.json"
_validator: jsonschema.Draft202012Validator | None = None


@dataclass
class GateRun:
    rc: int
    stdout: str
    stderr: str
    seconds: float
    doc: dict[str, Any] | None

    def check(self, check_id: str) -> dict[str, Any]:
        assert self.doc is not None, "no JSON verdict"
        return next(c for c in self.doc["checks"] if c["id"] == check_id)

    def status(self, check_id: str) -> str:
        return str(self.check(check_id)["status"])


def validate(doc: dict[str, Any]) -> None:
    """Raise if doc does not follow doctor/schemas/gate.schema.json."""
    global _validator
    if _validator is None:
        _validator = jsonschema.Draft202012Validator(
            json.loads(SCHEMA_PATH.read_text()), format_checker=jsonschema.FormatChecker())
    _validator.validate(doc)


def run_gate(env: dict[str, str], *args: str, tmp_path: Path, timeout: float = 60) -> GateRun:
    """`python -m doctor --check-only ARGS` with the JSON verdict also written to a file."""
    out = tmp_path / f"verdict-{time.monotonic_ns()}.json"
    argv = [sys.executable, "-m", "doctor", "--check-only", "--json-file", str(out), *args]
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    seconds = time.monotonic() - t0
    doc = json.loads(out.read_text()) if out.exists() else None
    if doc is not None:
        validate(doc)
    return GateRun(proc.returncode, proc.stdout, proc.stderr, seconds, doc)
