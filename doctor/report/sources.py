"""Readers for what other parts of gpu-doctor leave behind: the remedy journal,
the launcher's run records, log files around matched signatures, experiment
folders, and the P2P matrix. Each tolerates absence and odd shapes: a report
must still be written when a source is missing or half-written.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

STATE_DIR = ".gpu-doctor"
CONTEXT_LINES = 3
MAX_LINE = 400
MAX_EXCERPTS = 60
MAX_RUN_FILE = 4 * 1024 * 1024


def _get(obj: Any, *keys: str) -> Any:
    if not isinstance(obj, Mapping):
        return None
    return next((obj[k] for k in keys if obj.get(k) is not None), None)


def os_release(path: Path = Path("/etc/os-release")) -> str | None:
    try:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        return None
    return None


def clip(text: str, limit: int = MAX_LINE) -> str:
    """One display line: the last carriage-return segment (progress bars), bounded."""
    text = text.rstrip("\n").split("\r")[-1] if "\r" in text.rstrip("\r\n") else text.rstrip("\r\n")
    return text if len(text) <= limit else text[:limit] + f" ... [{len(text) - limit} more characters]"


def _read_json(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_RUN_FILE:
            return None
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None


def _read_jsonl(path: Path) -> list[Any]:
    out = []
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in itertools.islice(fh, 10_000):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        return []
    return out


# -- remedy journal ---------------------------------------------------------------------------

def remedy_journal(root: Path | None) -> dict[str, Any]:
    """Remedies applied in this job folder, one entry per (transaction, remedy).

    Reads `<job>/.gpu-doctor/journal.jsonl` through the remedies area's reader
    (`doctor.remedy.journal`); without it, a plain list of `{"remedy": ...}` records.
    """
    if root is None:
        return {"path": None, "entries": [], "note": "N/A (no job folder)"}
    path = root / STATE_DIR / "journal.jsonl"
    if not path.is_file():
        return {"path": None, "entries": [], "note": "N/A (no remedy journal: nothing was applied with gpu-doctor)"}
    try:
        from doctor.remedy import journal
    except ImportError:
        entries = [e for e in (_journal_entry(r) for r in _read_jsonl(path)) if e]
    else:
        entries = [e for t in journal.transactions(root) for e in _transaction_entries(t)]
        entries += [e for e in (_journal_entry(r) for r in _read_jsonl(path) if "tx" not in r) if e]
    return {"path": str(path), "entries": entries, "note": None if entries else "the journal holds no remedy"}


def _transaction_entries(t: Any) -> list[dict[str, Any]]:
    """A journal transaction (begin/commit/verify/undo records) as report entries."""
    action = "undone" if t.undone else {"applied": "applied", "aborted": "aborted"}.get(t.end, "interrupted")
    files = [str(f.get("path")) for f in t.files if isinstance(f, Mapping)]
    out = []
    for rem in t.remedies:
        verify = t.verify.get(rem.get("id"), {}) if isinstance(t.verify, Mapping) else {}
        out.append({"remedy": str(rem.get("id")), "check": ", ".join(rem.get("checks") or []) or None,
                    "action": action, "time": t.begin.get("time"), "tx": t.tx,
                    "applied": t.end == "applied" and not t.undone, "verified": verify.get("verified"),
                    "undone": bool(t.undone), "files": [str(f) for f in rem.get("files") or files]})
    return out


def _journal_entry(raw: Any) -> dict[str, Any] | None:
    remedy = _get(raw, "remedy", "remedy_id", "id")
    if remedy is None:
        return None
    files = _get(raw, "files", "changed", "paths") or []
    return {
        "remedy": str(remedy),
        "check": _get(raw, "check", "check_id", "finding"),
        "action": str(_get(raw, "action", "kind", "op") or "apply"),
        "time": _get(raw, "time", "timestamp", "applied_at", "at"),
        "applied": bool(_get(raw, "applied") if _get(raw, "applied") is not None else True),
        "verified": _get(raw, "verified"),
        "undone": bool(_get(raw, "undone") or str(_get(raw, "action", "kind", "op")) == "undo"),
        "files": [str(f) for f in files] if isinstance(files, list) else [str(files)],
    }


def applied_state(entries: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """remedy id -> {applied, verified} (what `doctor.verdict` reads), the latest entry winning."""
    state: dict[str, dict[str, Any]] = {}
    for e in entries:
        if e.get("action") in ("aborted", "interrupted"):
            continue
        applied = bool(e.get("applied")) and not e.get("undone")
        state[str(e["remedy"])] = {"applied": applied, "verified": e.get("verified") if applied else None}
    return state


# -- the last launch ------------------------------------------------------------------------

def workdirs(root: Path | None) -> list[Path]:
    dirs = [root] if root is not None else []
    cwd = Path.cwd()
    return dirs + ([cwd] if cwd not in dirs else [])


def last_launch(dirs: Iterable[Path]) -> dict[str, Any]:
    """The newest record under `<workdir>/.gpu-doctor/runs/`: a run folder or a JSON file."""
    candidates: list[Path] = []
    for d in dirs:
        runs = d / STATE_DIR / "runs"
        if runs.is_dir():
            candidates += [p for p in runs.iterdir() if p.is_dir() or p.suffix == ".json"]
    if not candidates:
        return {"path": None, "ranks": [], "note": "N/A (no launch recorded by gpu-doctor launch)"}
    newest = max(candidates, key=lambda p: p.stat().st_mtime)
    record = _run_record(newest)
    if record is None:
        return {"path": str(newest), "ranks": [], "note": "N/A (the run record is missing or unreadable)"}
    ranks = _ranks(_get(record, "ranks", "rank_status", "processes"), newest)
    failing = _get(record, "first_failed", "first_failing_rank", "first_failed_rank")
    if failing is None:
        bad = [r for r in ranks if r["exit_code"] not in (0, None)]
        failing = bad[0]["rank"] if bad else None
    return {"path": str(newest), "started": _get(record, "started", "start", "start_time") or newest.name,
            "world_size": _get(record, "world_size") or len(ranks), "exit_code": _get(record, "exit_code"),
            "reason": _get(record, "reason", "status", "outcome"), "stopped_by": _get(record, "stopped_by"),
            "warmup": _get(record, "warmup"), "duration_s": _get(record, "duration_s"),
            "first_failing_rank": failing if isinstance(failing, int) else None, "ranks": ranks, "note": None}


def _run_record(path: Path) -> Any:
    if path.is_file():
        return _read_json(path)
    for name in ("summary.json", "run.json", "status.json", "result.json"):
        if (path / name).is_file():
            return _read_json(path / name)
    files = sorted(path.glob("*.json"))
    return _read_json(files[0]) if files else None


def _ranks(raw: Any, where: Path) -> list[dict[str, Any]]:
    if isinstance(raw, Mapping):
        raw = [{"rank": k, **v} if isinstance(v, Mapping) else {"rank": k, "exit_code": v} for k, v in raw.items()]
    out = []
    for i, r in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(r, Mapping):
            continue
        log = _get(r, "log_path", "log", "log_file")
        if log is not None and not Path(str(log)).is_absolute():
            log = str(where / str(log) if where.is_dir() else where.parent / str(log))
        rank = _get(r, "rank")
        out.append({"rank": int(rank) if str(rank).isdigit() else i,
                    "host": _get(r, "host", "node"),
                    "status": _get(r, "state", "status"),
                    "exit_code": _get(r, "exit_code", "returncode", "rc"),
                    "signal": _get(r, "signal"),
                    "duration_s": _get(r, "duration_s", "duration", "elapsed_s"),
                    "experiment_dir": _get(r, "experiment_dir", "experiment", "scorep_dir"),
                    "log": log, "last_lines": [str(x) for x in _get(r, "last_lines") or []][-40:]})
    return sorted(out, key=lambda r: r["rank"])


# -- log excerpts -----------------------------------------------------------------------------

def _resolve(file: str, root: Path | None) -> Path:
    path = Path(file)
    return path if path.is_absolute() or root is None else root / path


def read_lines(path: Path, first: int, last: int) -> list[tuple[int, str]]:
    """Lines first..last (1-based, inclusive), streamed so huge logs are fine."""
    try:
        with path.open(encoding="utf-8", errors="replace", newline="\n") as fh:
            chosen = itertools.islice(fh, max(first - 1, 0), last)
            return [(first + i, clip(line)) for i, line in enumerate(chosen)]
    except OSError:
        return []


def log_excerpts(matches: Any, root: Path | None) -> list[dict[str, Any]]:
    """Lines around each matched signature (fact `logscan`), one excerpt per (file, line)."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    for m in matches if isinstance(matches, list) else []:
        file, line = _get(m, "file"), _get(m, "line")
        if not isinstance(file, str) or not isinstance(line, int) or (file, line) in seen:
            continue
        seen.add((file, line))
        lines = read_lines(_resolve(file, root), max(1, line - CONTEXT_LINES), line + CONTEXT_LINES)
        if not lines:
            lines = [(line, clip(str(_get(m, "text") or "")))]
        out.append({"signature": str(_get(m, "signature") or "?"), "file": file, "line": line,
                    "values": dict(_get(m, "values") or {}),
                    "lines": [{"n": n, "text": t, "match": n == line} for n, t in lines]})
        if len(out) >= MAX_EXCERPTS:
            break
    return out


def log_tail(path: Path, count: int = 40) -> list[str]:
    """The last `count` lines of a file (for per-rank logs in the bundle)."""
    try:
        with path.open("rb") as fh:
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
        path = getattr(item, "path", None) or _get(summary, "path", "dir", "folder") or \
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
    matrix = _get(value, "matrix") if isinstance(value, Mapping) else value
    if isinstance(matrix, list) and matrix and all(isinstance(r, list) for r in matrix):
        labels = _get(value, "labels")
        names = [str(x) for x in labels] if isinstance(labels, list) and len(labels) == len(matrix) else \
            [f"GPU{i}" for i in range(len(matrix))]
        return {"labels": names, "rows": [[_cell(c) for c in row] for row in matrix], "raw": None, "note": None}
    pairs = (_get(value, "views", "pairs") if isinstance(value, Mapping) else value) or []
    cells: dict[tuple[int, int], str] = {}
    for p in pairs if isinstance(pairs, list) else []:
        a, b = _get(p, "src", "a"), _get(p, "dst", "b")
        if isinstance(a, int) and isinstance(b, int):
            cells[(a, b)] = _cell(p)
    gpus = _get(value, "gpus") if isinstance(value, Mapping) else None
    if not cells:
        return {"labels": [], "rows": [], "raw": json.dumps(json_safe(value), default=str)[:4000], "note": None}
    n = max(len(gpus) if isinstance(gpus, list) else 0, max(max(a, b) for a, b in cells) + 1)
    rows = [["-" if i == j else cells.get((i, j), "?") for j in range(n)] for i in range(n)]
    return {"labels": [f"GPU{i}" for i in range(n)], "rows": rows, "raw": None, "note": None}


def _cell(value: Any) -> str:
    if isinstance(value, Mapping):
        parts = [_get(value, "cell", "status"), _get(value, "link", "topology")]
        return " ".join(str(p) for p in parts if p is not None) or "?"
    return "?" if value is None else str(value)
