"""The `canary` fact: the newest canary.json a `gpu-doctor launch --canary K` left in the job folder.

Looked for in the folder itself (PATH is a run folder), one and two levels down (`--run-dir
logs`), and in gpu-doctor's default run folders (`.gpu-doctor/runs/*/`). The value is a
`CanaryRun`: the file, its document, or the one-line problem that made it unreadable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from doctor.facts import ProbeContext, provider

PATTERNS = ("canary.json", "*/canary.json", "*/*/canary.json", ".gpu-doctor/runs/*/canary.json")
MAX_BYTES = 4 << 20
KEYS = ("k", "verdict", "mismatches", "missed", "ranks", "cost")


@dataclass(frozen=True)
class CanaryRun:
    path: str | None             # None: the job folder holds no canary.json
    doc: dict[str, Any] | None
    problem: str = ""            # why `path` could not be read


def read(path: Path) -> CanaryRun:
    try:
        if path.stat().st_size > MAX_BYTES:
            return CanaryRun(str(path), None, f"{path}: larger than {MAX_BYTES >> 20} MiB, not a canary record")
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        return CanaryRun(str(path), None, f"{path}: cannot read it: {exc.strerror or exc}")
    except (ValueError, UnicodeDecodeError) as exc:
        return CanaryRun(str(path), None, f"{path}: not JSON ({exc})")
    if not isinstance(doc, dict) or any(k not in doc for k in KEYS):
        return CanaryRun(str(path), None, f"{path}: not a gpu-doctor canary record (needs {', '.join(KEYS)})")
    for key in ("mismatches", "missed"):
        events = doc[key]
        if not isinstance(events, list) or not all(isinstance(e, dict) and isinstance(e.get("line"), str)
                                                   and isinstance(e.get("step"), int) for e in events):
            return CanaryRun(str(path), None, f"{path}: '{key}' is not a list of checks with 'step' and 'line'")
    if not isinstance(doc["ranks"], dict) or not isinstance(doc["cost"], dict):
        return CanaryRun(str(path), None, f"{path}: 'ranks' and 'cost' must be objects")
    return CanaryRun(str(path), doc)


def newest(root: Path) -> Path | None:
    found: set[Path] = set()
    for pattern in PATTERNS:
        found.update(p for p in root.glob(pattern) if p.is_file() and not p.is_symlink())
    return max(found, key=lambda p: (p.stat().st_mtime, str(p)), default=None)


@provider("canary", timeout=20.0, reads_user_files=True)
def canary(ctx: ProbeContext) -> CanaryRun:
    root = ctx.case.root
    if root is None or not Path(root).is_dir():
        return CanaryRun(None, None)
    path = newest(Path(root))
    return read(path) if path is not None else CanaryRun(None, None)
