"""`gpu-doctor list-checks` and `gpu-doctor explain ID`, generated from the catalogue."""

from __future__ import annotations

import sys

from doctor import registry


def list_checks_main(argv: list[str]) -> int:
    if argv and argv[0] not in ("--json",):
        print(f"gpu-doctor: error: list-checks takes no argument but --json, got {argv[0]!r}",
              file=sys.stderr)
        return 2
    checks = registry.all_checks()
    if argv:
        import json

        json.dump([{"id": c.id, "layer": c.layer, "title": c.title, "depends_on": list(c.depends_on),
                    "remedies": list(c.remedies)} for c in checks], sys.stdout, indent=2)
        print()
        return 0
    for c in checks:
        print(f"{c.id:<8} {c.layer:<13} {c.title}")
    return 0


def explain_text(check_id: str) -> str:
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
    if len(argv) != 1:
        print("gpu-doctor: error: usage: gpu-doctor explain ID (e.g. GPU003)", file=sys.stderr)
        return 2
    try:
        print(explain_text(argv[0]))
    except KeyError as exc:
        print(f"gpu-doctor: error: {exc.args[0]}", file=sys.stderr)
        return 2
    return 0
