"""What the Markdown and HTML renderers share: titles, labels and table rows from the document."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from doctor.wording import count

NOTABLE = ("fail", "timeout", "unknown", "warn")
TAIL_LINES = 15


def text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return str(value)


def yes_no(value: Any) -> str:
    return "N/A" if value is None else ("yes" if value else "no")


def status_label(status: str) -> str:
    return status.upper()


def title(doc: Mapping[str, Any]) -> str:
    return f"gpu-doctor report: {doc['run']['host']} ({status_label(doc['status'])})"


def verdict(doc: Mapping[str, Any]) -> str:
    bad = [c["id"] for c in doc["checks"] if c["status"] in NOTABLE]
    tail = f"; needs attention: {', '.join(bad)}" if bad else ""
    run = doc["run"]
    return f"{status_label(doc['status'])} (exit code {doc['exit_code']}, playbook {run['playbook']}){tail}"


def redaction_line(doc: Mapping[str, Any]) -> str:
    red = doc["redaction"]
    if not red["enabled"]:
        return "OFF (--no-redact): this report may contain secrets and personal data"
    counts = red["counts"]
    total = sum(counts.values())
    hosts = "host names hashed" if red["hash_hosts"] else "host names kept"
    return f"on; {count(total, 'item')} redacted or left out; {hosts} (see Redaction)"


def redaction_rows(doc: Mapping[str, Any]) -> list[tuple[str, int, str]]:
    red = doc["redaction"]
    return [(rule, red["counts"].get(rule, 0), what) for rule, what in red["rules"].items()]


def notable(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Checks with something to say, worst first, in run order within a status."""
    order = {s: i for i, s in enumerate(NOTABLE)}
    return sorted((c for c in doc["checks"] if c["status"] in NOTABLE), key=lambda c: order[c["status"]])


def problem_name(p: Mapping[str, Any]) -> str:
    """'ART004 (fp16_valueerror)' or 'SCR002'."""
    return f"{p['id']} ({p['signature']})" if p.get("signature") else str(p["id"])


def diagnosis_rows(doc: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(root cause, status, what it explains, next command) per root cause, then the rest."""
    diag = doc.get("diagnosis") or {}
    rows = []
    for r in diag.get("root_causes", []):
        explains = "; ".join(f"{'may explain ' if s.get('unsure') else ''}{problem_name(s)} {s['status']}: "
                             f"{s['message']}{' (' + s['unsure'] + ')' if s.get('unsure') else ''}"
                             for s in r["explains"])
        rows.append((f"{problem_name(r)}: {r['message']}", r["status"], explains, r["next"]))
    for u in diag.get("unexplained", []):
        rows.append((f"{problem_name(u)}: {u['message']}", u["status"],
                     f"cause not found; possible: {', '.join(u['possible_causes'])}", u["next"]))
    for p in diag.get("independent", []):
        rows.append((f"{problem_name(p)}: {p['message']}", p["status"], "", p["next"]))
    return rows


def evidence_line(e: Mapping[str, Any]) -> str:
    where = f"{e['file']}:{e['line']}: " if e.get("file") and e.get("line") else \
        (f"{e['file']}: " if e.get("file") else "")
    label = f"{e['label']}: " if e.get("label") else ""
    return f"{where}{label}{e['text']}"


def finding_blocks(check: Mapping[str, Any]) -> list[tuple[str, str, list[str]]]:
    """(status, message, evidence lines) for each finding of a check that is not pass/skip."""
    return [(f["status"], f["message"], [evidence_line(e) for e in f["evidence"]])
            for f in check.get("findings", []) if f["status"] not in ("pass", "skip")]


def remedy_rows(check: Mapping[str, Any]) -> Iterable[tuple[Any, ...]]:
    return ((r["id"], r["safety"], yes_no(r["applied"]), yes_no(r["verified"]), r["title"])
            for r in check["remedies"])


def version_rows(doc: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(component, version, source); the source names the interpreter a version was read in."""
    return [(v["name"], v["value"] or v["note"],
             f"{v['source']} (in {v['python']})" if v.get("python") else v["source"]) for v in doc["versions"]]


def matrix_rows(topo: Mapping[str, Any]) -> list[list[str]]:
    """The P2P table with the row labels in front (rows: source GPU, columns: destination)."""
    return [[label, *row] for label, row in zip(topo["labels"], topo["rows"], strict=True)]


def system_rows(doc: Mapping[str, Any]) -> list[tuple[str, Any]]:
    s = doc["system"]
    return [("Host", s["host"]), ("FQDN", s["fqdn"]), ("OS", s["os"]), ("Kernel", s["kernel"]),
            ("Machine", s["machine"]), ("CPUs", s["cpu_count"]),
            ("Python (gpu-doctor)", f"{s['python']['implementation']} {s['python']['version']} "
                                    f"({s['python']['executable']})"),
            ("Python (job)", f"{s['job_python']} ({s['job_python_from']})" if s.get("job_python_from")
             else s["job_python"]), ("Job folder", doc["run"]["path"] or "none (node only)"),
            ("Slurm job id", doc["run"]["slurm_job_id"] or "not in a Slurm job"),
            ("Run started", doc["run"]["start"]), ("Run duration (s)", doc["run"]["duration_s"])]


def rank_rows(launch: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    return [(r["rank"], r["host"], r["status"], r["exit_code"] if r["signal"] is None else
             f"{r['exit_code']} ({r['signal']})", r["duration_s"], r["experiment_dir"], r["log"])
            for r in launch["ranks"]]


def launch_line(ll: Mapping[str, Any]) -> str:
    parts = [f"Run record {ll['path']}", f"started {ll.get('started') or 'N/A'}",
             f"world size {ll.get('world_size')}"]
    if ll.get("exit_code") is not None:
        parts.append(f"exit code {ll['exit_code']}")
    if ll.get("reason"):
        parts.append(str(ll["reason"]))
    if ll.get("first_failing_rank") is not None:
        parts.append(f"first failing rank: {ll['first_failing_rank']}")
    return "; ".join(parts) + "."


def failing_rank(ll: Mapping[str, Any]) -> Mapping[str, Any] | None:
    first = ll.get("first_failing_rank")
    return next((r for r in ll["ranks"] if r["rank"] == first), None) if first is not None else None


def excerpt_text(ex: Mapping[str, Any]) -> str:
    width = len(str(max((ln["n"] for ln in ex["lines"]), default=0)))
    return "\n".join(f"{'>' if ln['match'] else ' '} {ln['n']:>{width}} | {ln['text']}" for ln in ex["lines"])



def reading_rows(doc: Mapping[str, Any]) -> tuple[str, list[tuple[str, str, str]], list[tuple[str, str, str, str]]]:
    """How the launch was read: the reading's line, (file:line, reading, argv) per process, and
    (file:line, what, static, observed) where the two readings differ. Empty when no job was read."""
    job = doc.get("job") or {}
    rows: list[tuple[str, str, str]] = []
    todo = list(job.get("processes") or [])
    while todo:
        n = todo.pop(0)
        if n.get("kind") == "command":
            argv = " ".join(n.get("argv") or [])
            rows.append((f"{n['file']}:{n['line']}", str(n.get("read", "static")),
                         argv if len(argv) <= 100 else argv[:99] + "…"))
        todo[:0] = list(n.get("children") or [])
    diffs = [(f"{d['file']}:{d['line']}", str(d["what"]), text(d.get("static")), text(d.get("observed")))
             for d in job.get("differences") or []]
    return str(job.get("reading") or ""), rows, diffs
