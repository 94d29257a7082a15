"""The Markdown report: reads well in a terminal (`less`, `glow`) and in a ticket system.

Tables hold one line per row (pipes escaped, newlines folded); long texts
(evidence, excerpts, the Score-P config summary) go into fenced blocks whose
fence is longer than any backtick run inside them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from doctor.report import timeline, view
from doctor.sanitize import html_text, shown


def cell(value: Any) -> str:
    """One table cell: a single line, pipes escaped, empty shown as a dash."""
    text = view.text(value)
    text = re.sub(r"\s*[\r\n]+\s*", " ⏎ ", text)
    text = html_text(text, one_line=True, quote=False).replace("\\", "\\\\").replace("|", "\\|")
    return text or "-"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(cell(h) for h in headers) + " |",
           "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        out.append("| " + " | ".join(cell(c) for c in row) + " |")
    return out + [""]


def fenced(text: str, lang: str = "text") -> list[str]:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + lang, text.rstrip("\n"), fence, ""]


def _kv(pairs: Iterable[tuple[str, Any]]) -> list[str]:
    return table(("Field", "Value"), pairs)


def render(doc: Mapping[str, Any]) -> str:
    lines: list[str] = [f"# {html_text(view.title(doc), one_line=True, quote=False)}", ""]
    lines += [f"Generated {doc['report']['generated']} by gpu-doctor {doc['tool']['version']}.", ""]
    lines += [f"- **Verdict:** {view.verdict(doc)}",
              f"- **Command:** `{doc['report']['command_line'].replace('`', '')}`",
              f"- **Redaction:** {view.redaction_line(doc)}", ""]
    for heading, body in sections(doc):
        lines += [f"## {heading}", ""] + body
    return shown("\n".join(lines).rstrip("\n")) + "\n"  # no control character, in a fence either


def sections(doc: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    where = [("Where the time goes", _timeline(doc["timeline"]))] if doc.get("timeline") else []
    return [
        ("Summary", _summary(doc)),
        ("Diagnosis", _diagnosis(doc)),
        ("System", _kv(view.system_rows(doc))),
        ("Versions", table(("Component", "Version", "Source"), view.version_rows(doc))),
        ("Score-P configuration", _scorep(doc)),
        ("GPUs", _gpus(doc)),
        ("Topology and P2P", _topology(doc)),
        ("Slurm job", _slurm(doc)),
        ("Environment", _environment(doc)),
        ("Findings", _findings(doc)),
        ("Remedies applied", _journal(doc)),
        ("Last launch", _launch(doc)),
        *where,
        ("Log excerpts", _excerpts(doc)),
        ("Redaction", table(("Rule", "Count", "What it does"), view.redaction_rows(doc))),
    ]


def _diagnosis(doc: Mapping[str, Any]) -> list[str]:
    rows = view.diagnosis_rows(doc)
    if not rows:
        return ["No problem to diagnose.", ""]
    nxt = (doc.get("diagnosis") or {}).get("next")
    head = [f"Next: `{nxt}`", ""] if nxt else []
    return head + table(("Problem (root causes first)", "Status", "Explains", "Next"), rows)


def _summary(doc: Mapping[str, Any]) -> list[str]:
    counts = ", ".join(f"{n} {s}" for s, n in doc["counts"].items() if n) or "no checks ran"
    rows = [(c["id"], view.status_label(c["status"]), c["layer"], c["message"]) for c in view.notable(doc)]
    body = [f"Checks: {counts}.", ""]
    if not rows:
        return body + ["No check found a problem.", ""]
    return body + table(("Check", "Status", "Layer", "Message"), rows)


def _scorep(doc: Mapping[str, Any]) -> list[str]:
    sp = doc["scorep"]
    if not sp["available"]:
        return [sp["note"], ""]
    body = [f"`scorep-config`: {sp['scorep_config'] or 'N/A'}", ""]
    if not sp["config_summary"]:
        return body + ["No config summary reported.", ""]
    return body + fenced(sp["config_summary"])


def _gpus(doc: Mapping[str, Any]) -> list[str]:
    if not doc["gpus"]:
        return [doc["gpus_note"] or "N/A", ""]
    return table(("Index", "Name", "Memory", "PCI bus id", "UUID (hashed)"),
                 ((g["index"], g["name"], g["memory"], g["pci_bus_id"], g["uuid"]) for g in doc["gpus"]))


def _topology(doc: Mapping[str, Any]) -> list[str]:
    topo = doc["topology"]
    if not topo["available"]:
        return [topo["note"], ""]
    if not topo["rows"]:
        return ["P2P data in an unrecognised shape:", ""] + fenced(topo.get("raw") or "", "json")
    out = ["Peer access, rows = source GPU, columns = destination:", ""]
    out += table(["from/to", *topo["labels"]], view.matrix_rows(topo))
    if topo.get("legend"):
        out += [f"*{topo['legend']}*", ""]
    if topo.get("integrity"):
        out += ["P2P data-integrity test:", ""] + fenced(topo["integrity"])
    return out


def _slurm(doc: Mapping[str, Any]) -> list[str]:
    sl = doc["slurm"]
    if not sl["in_job"] and not sl["environment"]:
        return ["Not inside a Slurm job (no SLURM_* variables).", ""]
    return table(("Variable", "Value"), sl["environment"].items())


def _environment(doc: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for scope, title in (("process", "gpu-doctor's environment"), ("job", "set by the job's scripts")):
        env = doc["environment"].get(scope) or {}
        rows = [(k, v) for k, v in env.items() if not k.startswith(("SLURM_", "SLURMD_"))]
        out += [f"**{title}** ({len(rows)} shown; Slurm variables are under *Slurm job*)", ""]
        out += table(("Variable", "Value"), rows) if rows else ["None.", ""]
    reading, procs, diffs = view.reading_rows(doc)
    if reading:
        out += ["**How gpu-doctor read your launch**", "", cell(reading), ""]
        out += table(("Where", "Read", "Command"), procs) if procs else []
        out += table(("Where", "What", "Static reading", "Observed"), diffs) if diffs else []
    return out


def _findings(doc: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    notable = view.notable(doc)
    for c in notable:
        out += [f"### {c['id']} {view.status_label(c['status'])}: {cell(c['title'])}", ""]
        blocks = view.finding_blocks(c)
        for status, message, evidence in blocks:
            lead = f"- **{view.status_label(status)}** " if len(blocks) > 1 else ""
            out += [lead + cell(message), ""]
            if evidence:
                out += fenced("\n".join(evidence))
        if c["remedies"]:
            out += table(("Remedy", "Safety", "Applied", "Verified", "Title"), view.remedy_rows(c))
    quiet = [c["id"] for c in doc["checks"] if c not in notable]
    if quiet:
        out += [f"Passed or skipped without remark: {', '.join(quiet)}.", ""]
    return out or ["No checks ran.", ""]


def _journal(doc: Mapping[str, Any]) -> list[str]:
    j = doc["remedy_journal"]
    if not j["entries"]:
        return [j["note"] or "No remedy was applied.", ""]
    return table(("Time", "Remedy", "Check", "Action", "Verified", "Files"),
                 ((e["time"], e["remedy"], e["check"], "undone" if e["undone"] else e["action"],
                   view.yes_no(e["verified"]), ", ".join(e["files"])) for e in j["entries"]))


def _launch(doc: Mapping[str, Any]) -> list[str]:
    ll = doc["last_launch"]
    if not ll["ranks"]:
        return [ll["note"] or "N/A", ""]
    body = [f"{view.launch_line(ll)}", ""]
    body += table(("Rank", "Host", "State", "Exit", "Duration (s)", "Experiment", "Log"), view.rank_rows(ll))
    failing = view.failing_rank(ll)
    if failing is not None and failing.get("last_lines"):
        body += [f"Last lines of rank {failing['rank']}, the first to fail:", ""]
        body += fenced("\n".join(failing["last_lines"][-view.TAIL_LINES:]))
    hang = ll.get("hang")
    if hang:
        body += [f"Hang verdict (gpu-doctor launch --stall): {hang['verdict']}", ""]
        body += fenced("\n".join(hang.get("groups", [])))
    return body


def _excerpts(doc: Mapping[str, Any]) -> list[str]:
    if not doc["log_excerpts"]:
        return [doc.get("log_excerpts_note") or "No known signature matched in the logs.", ""]
    out: list[str] = []
    for ex in doc["log_excerpts"]:
        out += [f"### {cell(ex['signature'])} at {cell(ex['file'])}:{ex['line']}", ""]
        out += fenced(view.excerpt_text(ex))
    return out


def _timeline(tl: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for block in timeline.blocks(tl):
        if isinstance(block, timeline.Table):
            out += [f"**{cell(block.caption)}**", ""] + table(block.headers, block.rows)
        else:
            text = html_text(block.text, quote=False).replace("*", "\\*")
            out += [f"*{text}*" if block.muted else text, ""]
    return out
