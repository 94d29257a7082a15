"""Readers for the material around the findings: log lines around matched
signatures, experiment folders, and the P2P matrix. Each tolerates absence and
odd shapes: a report must still be written when a source is missing.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from doctor import safeopen

STATE_DIR = ".gpu-doctor"
CONTEXT_LINES = 3
MAX_LINE = 400
MAX_EXCERPTS = 60
MAX_RUN_FILE = 4 * 1024 * 1024


def first_field(obj: Any, *keys: str) -> Any:
    if not isinstance(obj, Mapping):
        return None
    return next((obj[k] for k in keys if obj.get(k) is not None), None)


def os_release(path: Path = Path("/etc/os-release")) -> str | None:
    try:
        for line in safeopen.read_text(path, 1 << 20).splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        return None
    return None


def clip(text: str, limit: int = MAX_LINE) -> str:
    """One display line: the last carriage-return segment (progress bars), bounded."""
    text = text.rstrip("\n").split("\r")[-1] if "\r" in text.rstrip("\r\n") else text.rstrip("\r\n")
    return text if len(text) <= limit else text[:limit] + f" ... [{len(text) - limit} more characters]"


def read_json(path: Path) -> Any:
    try:
        return json.loads(safeopen.read_text(path, MAX_RUN_FILE))
    except (OSError, ValueError):
        return None


def read_jsonl(path: Path) -> list[Any]:
    out = []
    try:
        with safeopen.open_text(path) as fh:
            for line in itertools.islice(fh, 10_000):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        return []
    return out


# -- log excerpts -----------------------------------------------------------------------------

def _resolve(file: str, root: Path | None) -> Path:
    path = Path(file)
    return path if path.is_absolute() or root is None else root / path


def read_lines(path: Path, first: int, last: int) -> list[tuple[int, str]]:
    """Lines first..last (1-based, inclusive), streamed so huge logs are fine."""
    try:
        with safeopen.open_text(path, newline="\n") as fh:
            chosen = itertools.islice(fh, max(first - 1, 0), last)
            return [(first + i, clip(line)) for i, line in enumerate(chosen)]
    except OSError:
        return []


def log_excerpts(matches: Any, root: Path | None) -> list[dict[str, Any]]:
    """Lines around each matched signature (fact `logscan`), one excerpt per (file, line)."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    for m in matches if isinstance(matches, list) else []:
        file, line = first_field(m, "file"), first_field(m, "line")
        if not isinstance(file, str) or not isinstance(line, int) or (file, line) in seen:
            continue
        seen.add((file, line))
        lines = read_lines(_resolve(file, root), max(1, line - CONTEXT_LINES), line + CONTEXT_LINES)
        if not lines:
            lines = [(line, clip(str(first_field(m, "text") or "")))]
        out.append({"signature": str(first_field(m, "signature") or "?"), "file": file, "line": line,
                    "values": dict(first_field(m, "values") or {}),
                    "lines": [{"n": n, "text": t, "match": n == line} for n, t in lines]})
        if len(out) >= MAX_EXCERPTS:
            break
    return out


def log_tail(path: Path, count: int = 40) -> list[str]:
    """The last `count` lines of a file (for per-rank logs in the bundle)."""
    try:
        with safeopen.open_binary(path) as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [clip(line) for line in data.splitlines()[-count:]]


# -- experiments and the P2P matrix ----------------------------------------------------------

def experiment_list(value: Any) -> list[dict[str, Any]]:
    """Experiment folders with their summaries (fact `experiments`: `Experiments.folders`)."""
    if isinstance(value, list):
        items: Any = value
    elif isinstance(value, Mapping):
        items = value.get("folders") or value.get("experiments") or []
    else:
        items = getattr(value, "folders", None) or []
    out = []
    for item in items:
        if hasattr(item, "to_json"):
            summary = json_safe(item.to_json())
        elif isinstance(item, Mapping) or hasattr(item, "__dataclass_fields__"):
            summary = json_safe(item)
        else:
            summary = {}
        path = getattr(item, "path", None) or first_field(summary, "path", "dir", "folder") or \
            (item if isinstance(item, str) else None)
        out.append({"path": str(path) if path else None, "summary": summary})
    return out


def json_safe(obj: Any, depth: int = 0) -> Any:
    """A JSON-serialisable copy (paths and dataclasses as strings/dicts), bounded in depth."""
    if depth > 8:
        return str(obj)
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [json_safe(v, depth + 1) for v in obj]
    if hasattr(obj, "__dataclass_fields__"):
        return {k: json_safe(getattr(obj, k), depth + 1) for k in obj.__dataclass_fields__}
    return str(obj)


def matrix_table(value: Any) -> dict[str, Any]:
    """Labels and rows of cell texts (rows: source GPU, columns: destination).

    Reads the P2P fact's `views` (cell + link per ordered pair), or plain
    `pairs` (src/dst), or a square `matrix`; anything else is kept as raw JSON.
    """
    if isinstance(value, Mapping) and value.get("driver_loaded") is False:
        return {"labels": [], "rows": [], "raw": None, "note": f"N/A (no P2P matrix: {value.get('error')})"}
    matrix = first_field(value, "matrix") if isinstance(value, Mapping) else value
    if isinstance(matrix, list) and matrix and all(isinstance(r, list) for r in matrix):
        labels = first_field(value, "labels")
        names = [str(x) for x in labels] if isinstance(labels, list) and len(labels) == len(matrix) else \
            [f"GPU{i}" for i in range(len(matrix))]
        return {"labels": names, "rows": [[_cell(c) for c in row] for row in matrix], "raw": None, "note": None}
    pairs = (first_field(value, "views", "pairs") if isinstance(value, Mapping) else value) or []
    cells: dict[tuple[int, int], str] = {}
    for p in pairs if isinstance(pairs, list) else []:
        a, b = first_field(p, "src", "a"), first_field(p, "dst", "b")
        if isinstance(a, int) and isinstance(b, int):
            cells[(a, b)] = _cell(p)
    gpus = first_field(value, "gpus") if isinstance(value, Mapping) else None
    if not cells:
        return {"labels": [], "rows": [], "raw": json.dumps(json_safe(value), default=str)[:4000], "note": None}
    n = max(len(gpus) if isinstance(gpus, list) else 0, max(max(a, b) for a, b in cells) + 1)
    rows = [["-" if i == j else cells.get((i, j), "?") for j in range(n)] for i in range(n)]
    return {"labels": [f"GPU{i}" for i in range(n)], "rows": rows, "raw": None, "note": None}


def _cell(value: Any) -> str:
    if isinstance(value, Mapping):
        parts = [first_field(value, "cell", "status"), first_field(value, "link", "topology")]
        return " ".join(str(p) for p in parts if p is not None) or "?"
    return "?" if value is None else str(value)
