"""What was done before this report: remedies applied (the journal under
`<job>/.gpu-doctor/`) and the last launch (`<workdir>/.gpu-doctor/runs/<time>/summary.json`).

Both tolerate absence and half-written files: a report must still be written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from doctor.report.sources import STATE_DIR, first_field, read_json, read_jsonl


def remedy_journal(root: Path | None) -> dict[str, Any]:
    """Remedies applied in this job folder, one entry per (transaction, remedy).

    Reads `<job>/.gpu-doctor/journal.jsonl` through the remedies area's reader
    (`doctor.remedy.journal`); without it, a plain list of `{"remedy": ...}` records.
    """
    if root is None:
        return {"path": None, "entries": [], "note": "N/A (no job folder)"}
    path = root / STATE_DIR / "journal.jsonl"
    if not path.is_file():
        return {"path": None, "entries": [],
                "note": "N/A (no remedy journal: nothing was applied with gpu-doctor)"}
    try:
        from doctor.remedy import journal
    except ImportError:
        entries = [e for e in (_journal_entry(r) for r in read_jsonl(path)) if e]
    else:
        try:
            entries = [e for t in journal.transactions(root) for e in _transaction_entries(t)]
        except journal.RemedyError as exc:
            return {"path": str(path), "entries": [], "note": f"the journal cannot be read: {exc}"}
        entries += [e for e in (_journal_entry(r) for r in read_jsonl(path) if "tx" not in r) if e]
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
    remedy = first_field(raw, "remedy", "remedy_id", "id")
    if remedy is None:
        return None
    files = first_field(raw, "files", "changed", "paths") or []
    return {
        "remedy": str(remedy),
        "check": first_field(raw, "check", "check_id", "finding"),
        "action": str(first_field(raw, "action", "kind", "op") or "apply"),
        "time": first_field(raw, "time", "timestamp", "applied_at", "at"),
        "applied": bool(first_field(raw, "applied") if first_field(raw, "applied") is not None else True),
        "verified": first_field(raw, "verified"),
        "undone": bool(first_field(raw, "undone") or str(first_field(raw, "action", "kind", "op")) == "undo"),
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
    ranks = _with_plan(_ranks(first_field(record, "ranks", "rank_status", "processes"), newest), newest)
    failing = first_field(record, "first_failed", "first_failing_rank", "first_failed_rank")
    if failing is None:
        bad = [r for r in ranks if r["exit_code"] not in (0, None)]
        failing = bad[0]["rank"] if bad else None
    return {"path": str(newest), "started": first_field(record, "started", "start", "start_time") or newest.name,
            "world_size": first_field(record, "world_size") or len(ranks), "exit_code": first_field(record, "exit_code"),
            "reason": first_field(record, "reason", "status", "outcome"), "stopped_by": first_field(record, "stopped_by"),
            "warmup": first_field(record, "warmup"), "duration_s": first_field(record, "duration_s"),
            "first_failing_rank": failing if isinstance(failing, int) else None, "ranks": ranks, "note": None,
            "hang": hang_record(newest)}


def hang_record(run_dir: Path) -> dict[str, Any] | None:
    """The stall watch's verdict of that run (`hang.json`, doctor.hang), or None: the sentence, the
    ranks that diverged, the collective, the grouped stacks as lines (redacted with the rest)."""
    path = run_dir / "hang.json"
    if not path.is_file():
        return None
    doc = read_json(path)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("verdict"), str):
        return {"verdict": "N/A (hang.json is unreadable)", "diverged_ranks": [], "groups": []}
    from doctor.hang.verdict import group_lines

    try:
        groups = group_lines([g for g in doc.get("groups", []) if isinstance(g, Mapping)])
    except (KeyError, TypeError):
        groups = []
    return {"verdict": doc["verdict"], "diverged_ranks": list(doc.get("diverged_ranks") or []),
            "collective": doc.get("collective"), "groups": groups, "path": str(path)}


def _with_plan(ranks: list[dict[str, Any]], run: Path) -> list[dict[str, Any]]:
    """Host, duration and experiment folder of each rank from what the launch planned (launch.json
    beside summary.json): the host it ran on, the Score-P folder it was given, and the time from the
    start to its log's last write."""
    plan = read_json(run / "launch.json") if run.is_dir() and (run / "launch.json").is_file() else None
    if not isinstance(plan, Mapping):
        return ranks
    planned = {p.get("rank"): p for p in plan.get("ranks") or [] if isinstance(p, Mapping)}
    started = (run / "launch.json").stat().st_mtime
    for r in ranks:
        p = planned.get(r["rank"]) or {}
        env: Mapping[str, Any] = p["env"] if isinstance(p.get("env"), Mapping) else {}
        if not r.get("host"):
            r["host"] = (plan.get("nodes") or {}).get(str(r["rank"])) or plan.get("host")
        if r.get("experiment_dir") is None and env.get("SCOREP_EXPERIMENT_DIRECTORY"):
            r["experiment_dir"] = str(Path(str(p.get("cwd") or run), str(env["SCOREP_EXPERIMENT_DIRECTORY"])))
        if r.get("duration_s") is None and r.get("log") and Path(str(r["log"])).is_file():
            r["duration_s"] = round(max(0.0, Path(str(r["log"])).stat().st_mtime - started), 1)
    return ranks


def _run_record(path: Path) -> Any:
    if path.is_file():
        return read_json(path)
    for name in ("summary.json", "run.json", "status.json", "result.json"):
        if (path / name).is_file():
            return read_json(path / name)
    files = sorted(path.glob("*.json"))
    return read_json(files[0]) if files else None


def _ranks(raw: Any, where: Path) -> list[dict[str, Any]]:
    if isinstance(raw, Mapping):
        raw = [{"rank": k, **v} if isinstance(v, Mapping) else {"rank": k, "exit_code": v}
               for k, v in raw.items()]
    out = []
    for i, r in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(r, Mapping):
            continue
        log = first_field(r, "log_path", "log", "log_file")
        if log is not None and not Path(str(log)).is_absolute():
            log = str(where / str(log) if where.is_dir() else where.parent / str(log))
        rank = first_field(r, "rank")
        out.append({"rank": int(rank) if str(rank).isdigit() else i,
                    "host": first_field(r, "host", "node"),
                    "status": first_field(r, "state", "status"),
                    "exit_code": first_field(r, "exit_code", "returncode", "rc"),
                    "signal": first_field(r, "signal"),
                    "duration_s": first_field(r, "duration_s", "duration", "elapsed_s"),
                    "experiment_dir": first_field(r, "experiment_dir", "experiment", "scorep_dir"),
                    "log": log, "last_lines": [str(x) for x in first_field(r, "last_lines") or []][-40:]})
    return sorted(out, key=lambda r: r["rank"])
