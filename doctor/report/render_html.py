"""The HTML report: one self-contained file (inline CSS, no scripts, no external assets).

It opens offline in any browser, prints cleanly, and every text in it comes
from the redacted document through `doctor.sanitize.html_text` (control characters escaped too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from doctor.report import timeline, view
from doctor.sanitize import html_text

CSS = """
:root { color-scheme: light dark; --bg:#fff; --fg:#1d2125; --muted:#5f6b76; --line:#d6dbe0; --code:#f4f6f8;
  --fail:#b3261e; --warn:#9a6700; --pass:#1a7f37; --unknown:#6639ba; }
@media (prefers-color-scheme: dark) { :root { --bg:#16191d; --fg:#e6e9ec; --muted:#9aa5b1; --line:#343a41;
  --code:#1f2429; } }
body { background:var(--bg); color:var(--fg); font:15px/1.5 system-ui, sans-serif; max-width:1100px;
  margin:2rem auto; padding:0 1rem; }
h1 { font-size:1.6rem; } h2 { border-bottom:1px solid var(--line); padding-bottom:.2rem; margin-top:2rem; }
h3 { font-size:1.05rem; margin-bottom:.3rem; }
table { border-collapse:collapse; margin:.5rem 0 1rem; width:100%; }
th, td { border:1px solid var(--line); padding:.25rem .5rem; text-align:left; vertical-align:top;
  overflow-wrap:break-word; }
td.key { white-space:nowrap; }
td code { overflow-wrap:break-word; }  /* anywhere would let a narrow column wrap one character a line */
th { background:var(--code); }
pre { background:var(--code); padding:.6rem .8rem; overflow-x:auto; border-radius:4px; font-size:13px; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
.muted { color:var(--muted); } .hit { font-weight:bold; }
.badge { display:inline-block; padding:0 .45rem; border-radius:3px; color:#fff; font-size:.8rem;
  font-weight:bold; vertical-align:middle; }
.s-fail, .s-timeout { background:var(--fail); } .s-warn { background:var(--warn); }
.s-pass { background:var(--pass); } .s-unknown, .s-skip { background:var(--unknown); }
.finding { border-left:4px solid var(--line); padding-left:.8rem; margin:1rem 0; }
.finding.fail, .finding.timeout { border-color:var(--fail); } .finding.warn { border-color:var(--warn); }
.finding.unknown { border-color:var(--unknown); }
.banner { padding:.6rem .8rem; border-radius:4px; background:var(--code); }
"""


def esc(value: Any) -> str:
    return html_text(view.text(value))


def badge(status: str) -> str:
    return f'<span class="badge s-{esc(status)}">{esc(view.status_label(status))}</span>'


def inline(value: Any) -> str:
    """Escaped text with its `code spans` (check messages and titles use them) as <code>."""
    parts = view.text(value).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: leave the text as it is
        return esc(value)
    return "".join(f"<code>{html_text(p)}</code>" if i % 2 else html_text(p) for i, p in enumerate(parts))


# Columns of IDs, statuses, layers and names: never broken inside a word ("SCP / 002").
KEY_HEADERS = {"Status", "Check", "Layer", "Remedy", "Safety", "Applied", "Verified", "Component", "Field",
               "Rule", "Count", "Index"}


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], raw_cols: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    keys = {i for i, h in enumerate(headers) if h in KEY_HEADERS}

    def cell(i: int, c: Any) -> str:
        attr = ' class="key"' if i in keys else ""
        return f"<td{attr}>{c if i in raw_cols else inline(c)}</td>"

    body = "".join("<tr>" + "".join(cell(i, c) for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def pre(text: str) -> str:
    return f"<pre>{html_text(text)}</pre>"


def para(text: str, cls: str = "") -> str:
    return f'<p class="{cls}">{inline(text)}</p>' if cls else f"<p>{inline(text)}</p>"


def render(doc: Mapping[str, Any]) -> str:
    parts = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="gpu-doctor">',
        f"<title>{esc(view.title(doc))}</title>", f"<style>{CSS}</style>", "</head>", "<body>",
        f"<h1>{esc(view.title(doc))}</h1>",
        f'<div class="banner"><div><b>Verdict:</b> {badge(doc["status"])} {esc(view.verdict(doc))}</div>'
        f'<div><b>Command:</b> <code>{esc(doc["report"]["command_line"])}</code></div>'
        f'<div><b>Redaction:</b> {esc(view.redaction_line(doc))}</div>'
        f'<div class="muted">Generated {esc(doc["report"]["generated"])} by gpu-doctor '
        f'{esc(doc["tool"]["version"])}</div></div>',
    ]
    for anchor, heading, body in sections(doc):
        parts.append(f'<section id="{anchor}"><h2>{esc(heading)}</h2>{body}</section>')
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


def sections(doc: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    where = [("timeline", "Where the time goes", _timeline(doc["timeline"]))] if doc.get("timeline") else []
    return [
        ("summary", "Summary", _summary(doc)),
        ("diagnosis", "Diagnosis", _diagnosis(doc)),
        ("findings", "Findings", _findings(doc)),
        ("system", "System", table(("Field", "Value"), view.system_rows(doc))),
        ("versions", "Versions", table(("Component", "Version", "Source"), view.version_rows(doc))),
        ("scorep", "Score-P configuration", _scorep(doc)),
        ("gpus", "GPUs", _gpus(doc)),
        ("topology", "Topology and P2P", _topology(doc)),
        ("slurm", "Slurm job", _slurm(doc)),
        ("environment", "Environment", _environment(doc)),
        ("remedies", "Remedies applied", _journal(doc)),
        ("launch", "Last launch", _launch(doc)),
        *where,
        ("logs", "Log excerpts", _excerpts(doc)),
        ("redaction", "Redaction", table(("Rule", "Count", "What it does"), view.redaction_rows(doc))),
    ]


def _summary(doc: Mapping[str, Any]) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in doc["counts"].items() if n) or "no checks ran"
    rows = [(badge(c["status"]), f'<a href="#check-{esc(c["id"])}">{esc(c["id"])}</a>', esc(c["layer"]),
             inline(c["message"])) for c in view.notable(doc)]
    return para(f"Checks: {counts}.") + (table(("Status", "Check", "Layer", "Message"), rows, (0, 1, 2, 3))
                                         if rows else para("No check found a problem."))


def _diagnosis(doc: Mapping[str, Any]) -> str:
    rows = [(inline(cause), badge(status), esc(explains), f"<code>{esc(nxt)}</code>")
            for cause, status, explains, nxt in view.diagnosis_rows(doc)]
    if not rows:
        return para("No problem to diagnose.")
    return table(("Problem (root causes first)", "Status", "Explains", "Next"), rows, (0, 1, 2, 3))


def _findings(doc: Mapping[str, Any]) -> str:
    out = []
    for c in view.notable(doc):
        body = [f'<h3>{badge(c["status"])} {esc(c["id"])}: {inline(c["title"])}</h3>']
        blocks = view.finding_blocks(c)
        for status, message, evidence in blocks:
            body.append(f"<p>{badge(status) + ' ' if len(blocks) > 1 else ''}{inline(message)}</p>")
            if evidence:
                body.append(pre("\n".join(evidence)))
        if c["remedies"]:
            body.append(table(("Remedy", "Safety", "Applied", "Verified", "Title"), view.remedy_rows(c)))
        out.append(f'<div class="finding {esc(c["status"])}" id="check-{esc(c["id"])}">{"".join(body)}</div>')
    quiet = [c for c in doc["checks"] if c["status"] not in view.NOTABLE]
    if quiet:
        rows = ((c["id"], c["status"], c["message"]) for c in quiet)
        out.append("<details><summary>Passed or skipped checks</summary>"
                   + table(("Check", "Status", "Message"), rows) + "</details>")
    return "".join(out) or para("No checks ran.")


def _scorep(doc: Mapping[str, Any]) -> str:
    sp = doc["scorep"]
    if not sp["available"]:
        return para(sp["note"])
    summary = sp["config_summary"]
    lines = len(summary.splitlines()) if summary else 0
    return para(f"scorep-config: {sp['scorep_config'] or 'N/A'}") + (
        f"<details><summary>scorep-info config-summary ({lines} lines)</summary>{pre(summary)}</details>"
        if summary else para("No config summary reported."))


def _gpus(doc: Mapping[str, Any]) -> str:
    if not doc["gpus"]:
        return para(doc["gpus_note"] or "N/A")
    return table(("Index", "Name", "Memory", "PCI bus id", "UUID (hashed)"),
                 ((g["index"], g["name"], g["memory"], g["pci_bus_id"], g["uuid"]) for g in doc["gpus"]))


def _topology(doc: Mapping[str, Any]) -> str:
    topo = doc["topology"]
    if not topo["available"]:
        return para(topo["note"])
    if not topo["rows"]:
        return para("P2P data in an unrecognised shape:") + pre(topo.get("raw") or "")
    out = para("Peer access, rows = source GPU, columns = destination:")
    out += table(["from/to", *topo["labels"]], view.matrix_rows(topo))
    if topo.get("legend"):
        out += para(topo["legend"], "muted")
    if topo.get("integrity"):
        out += para("P2P data-integrity test:") + pre(topo["integrity"])
    return out


def _slurm(doc: Mapping[str, Any]) -> str:
    sl = doc["slurm"]
    if not sl["in_job"] and not sl["environment"]:
        return para("Not inside a Slurm job (no SLURM_* variables).")
    return table(("Variable", "Value"), sl["environment"].items())


def _environment(doc: Mapping[str, Any]) -> str:
    out = []
    for scope, heading in (("process", "gpu-doctor's environment"), ("job", "Set by the job's scripts")):
        env = doc["environment"].get(scope) or {}
        rows = [(k, v) for k, v in env.items() if not k.startswith(("SLURM_", "SLURMD_"))]
        out.append(f"<h3>{esc(heading)}</h3>" + (table(("Variable", "Value"), rows) if rows else para("None.")))
    reading, procs, diffs = view.reading_rows(doc)
    if reading:
        out.append("<h3>How gpu-doctor read your launch</h3>" + para(reading)
                   + (table(("Where", "Read", "Command"), procs) if procs else "")
                   + (table(("Where", "What", "Static reading", "Observed"), diffs) if diffs else ""))
    return "".join(out)


def _journal(doc: Mapping[str, Any]) -> str:
    j = doc["remedy_journal"]
    if not j["entries"]:
        return para(j["note"] or "No remedy was applied.")
    return table(("Time", "Remedy", "Check", "Action", "Verified", "Files"),
                 ((e["time"], e["remedy"], e["check"], "undone" if e["undone"] else e["action"],
                   view.yes_no(e["verified"]), ", ".join(e["files"])) for e in j["entries"]))


def _launch(doc: Mapping[str, Any]) -> str:
    ll = doc["last_launch"]
    if not ll["ranks"]:
        return para(ll["note"] or "N/A")
    out = para(view.launch_line(ll)) + table(
        ("Rank", "Host", "State", "Exit", "Duration (s)", "Experiment", "Log"), view.rank_rows(ll))
    failing = view.failing_rank(ll)
    if failing is not None and failing.get("last_lines"):
        out += para(f"Last lines of rank {failing['rank']}, the first to fail:")
        out += pre("\n".join(failing["last_lines"][-view.TAIL_LINES:]))
    hang = ll.get("hang")
    if hang:
        out += para(f"Hang verdict (gpu-doctor launch --stall): {hang['verdict']}")
        out += pre("\n".join(hang.get("groups", [])))
    return out


def _excerpts(doc: Mapping[str, Any]) -> str:
    if not doc["log_excerpts"]:
        return para(doc.get("log_excerpts_note") or "No known signature matched in the logs.")
    return "".join(f"<h3><code>{esc(ex['signature'])}</code> at {esc(ex['file'])}:{esc(ex['line'])}</h3>"
                   + pre(view.excerpt_text(ex)) for ex in doc["log_excerpts"])


def _timeline(tl: Mapping[str, Any]) -> str:
    out = []
    for block in timeline.blocks(tl):
        if isinstance(block, timeline.Table):
            out.append(f"<h3>{esc(block.caption)}</h3>" + table(block.headers, block.rows))
        else:
            out.append(para(block.text, "muted" if block.muted else ""))
    return "".join(out)
