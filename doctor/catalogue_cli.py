"""`gpu-doctor list-checks` and `gpu-doctor explain ID`, generated from the catalogue."""

from __future__ import annotations

import sys
import textwrap
from typing import TYPE_CHECKING

from doctor import registry

if TYPE_CHECKING:
    from doctor.arguments import Parser


def list_checks_parser() -> Parser:
    from doctor.arguments import Parser

    p = Parser(prog="gpu-doctor list-checks", description="List every check: ID, layer and title.")
    p.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    return p


def explain_parser() -> Parser:
    from doctor.arguments import Parser

    p = Parser(prog="gpu-doctor explain", description="Print one check's What / Why / Example / "
               "Remedy / Fix safety, and its remedies' steps.")
    p.add_argument("check_id", metavar="ID", help="a check ID, e.g. GPU003 (see `gpu-doctor list-checks`), "
                   "or a remedy ID a `next:` line names, e.g. scorep-add-cuda")
    return p


def list_checks_main(argv: list[str]) -> int:
    args = list_checks_parser().parse_args(argv)
    checks = registry.all_checks()
    if args.json:
        import json

        json.dump([{"id": c.id, "layer": c.layer, "title": c.title, "depends_on": list(c.depends_on),
                    "remedies": list(c.remedies)} for c in checks], sys.stdout, indent=2)
        print()
        return 0
    for c in checks:
        print(f"{c.id:<8} {c.layer:<13} {c.title}")
    return 0


def remedy_text(remedy_id: str) -> str:
    """A remedy ID (what a `next:` line prints): its safety, title, steps, and the checks that propose it."""
    rem = registry.REMEDIES[remedy_id]
    lines = [f"{rem.id} (remedy, {rem.safety.value}): {rem.title}"]
    if rem.steps:
        lines += ["", "Steps:", *[f"  {step}" for step in rem.steps]]
    proposed = [c for c in registry.all_checks() if remedy_id in c.remedies]
    for c in proposed[:1]:
        why = section(c.doc or "", "Remedy:")
        if why:
            lines += ["", f"What it answers ({c.id}: {c.title}):", *[f"  {ln}" for ln in why.splitlines()]]
        safety = section(c.doc or "", "Fix safety:")
        if safety:
            lines += ["", "Fix safety:", *[f"  {ln}" for ln in safety.splitlines()]]
    if proposed:
        lines += ["", f"Proposed by: {', '.join(c.id for c in proposed)} (gpu-doctor explain {proposed[0].id})"]
    how = "gpu-doctor fix PATH --only " + rem.id + (" --unsafe" if rem.safety.value == "unsafe" else "")
    lines += ["", f"Preview: {how} --diff" if rem.plan is not None else "Manual: gpu-doctor fix PATH lists the steps"]
    return "\n".join(lines)


def explain_text(check_id: str) -> str:
    registry.load()
    if check_id not in registry.CHECKS and check_id in registry.REMEDIES:
        return remedy_text(check_id)
    c = registry.get_check(check_id)
    lines = [f"{c.id} ({c.layer}): {c.title}", ""]
    lines.append(c.doc or "(no documentation)")
    if c.depends_on:
        lines += ["", f"Depends on: {', '.join(c.depends_on)}"]
    lines += _links(c.id)
    if c.remedies:
        lines += ["", "Remedies:"]
        for rid in c.remedies:
            rem = registry.remedy_for(rid)
            if rem is None:
                lines.append(f"  {rid}")
                continue
            lines.append(f"  {rid} [{rem.safety.value}] {rem.title}")
            lines += [f"    {step}" for step in rem.steps]
    return "\n".join(lines)


def section(doc: str, name: str) -> str:
    """The text of one docstring section ("Remedy:"), up to the next section heading."""
    lines = doc.splitlines()
    heads = {"Severity:", *SECTIONS}
    start = next((i for i, ln in enumerate(lines) if ln.strip() == name), None)
    if start is None:
        return ""
    body = []
    for ln in lines[start + 1:]:
        if ln.strip() in heads:
            break
        body.append(ln.strip())
    return "\n".join(body).strip()


SECTIONS = ("What it does:", "Why is this bad?", "Example:", "Use instead:", "Remedy:", "Fix safety:")


def doc_markdown(doc: str) -> str:
    """A check's docstring as Markdown: section names in bold, indented lines (an Example's
    commands, one per line) as a code block, so a renderer does not join them into one line."""
    out: list[str] = []
    code: list[str] = []

    def flush() -> None:
        if code:
            out.extend(["```", *textwrap.dedent("\n".join(code)).splitlines(), "```", ""])
            code.clear()

    for line in doc.splitlines():
        if line.startswith((" " * 4, "\t")) and line.strip():
            code.append(line)
            continue
        flush()
        if line.strip() in SECTIONS:
            out += ["", f"**{line.strip()}**", ""]
        else:
            out.append(line)
    flush()
    return "\n".join(out).strip() + "\n"


def _links(check_id: str) -> list[str]:
    """The diagnosis table's lines for this check: what it can explain, what can explain it."""
    from doctor.diagnosis import LINKS

    def named(key: str) -> bool:
        return key.partition(":")[0] == check_id

    causes = [f"  {', '.join(lk.causes)} -> {lk.symptom}: {lk.why}" for lk in LINKS if named(lk.symptom)]
    effects = [f"  {lk.symptom} <- {', '.join(k for k in lk.causes if named(k))}: {lk.why}"
               for lk in LINKS if any(named(k) for k in lk.causes)]
    out = ["", "Can be explained by:", *causes] if causes else []
    return out + (["", "Can explain:", *effects] if effects else [])


def explain_main(argv: list[str]) -> int:
    args = explain_parser().parse_args(argv)
    try:
        print(explain_text(args.check_id))
    except KeyError as exc:
        print(f"gpu-doctor: error: {exc.args[0]}", file=sys.stderr)
        return 2
    return 0
