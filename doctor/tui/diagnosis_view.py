"""The diagnosis on screen: root causes with what they explain, and a finding's links both ways."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text
from textual.widgets import Static

from doctor.diagnosis import Diagnosis, Problem
from doctor.sanitize import shown

STYLE = {"fail": "bold red", "warn": "yellow"}


def problem_text(p: Problem) -> Text:
    """'SCR002 fail' with the ART004 signature when there is one."""
    name = f"{p.check_id} ({p.signature})" if p.signature else p.check_id
    return Text.assemble((name, "bold"), " ", (p.status.value, STYLE.get(p.status.value, "")))


def diagnosis_renderable(diagnosis: Diagnosis | None) -> RenderableType:
    """One line per root cause ('SCR002 fail → explains ART003 fail, ART004 (...) fail'), then the next step."""
    if diagnosis is None:
        return Text("")
    lines: list[RenderableType] = []
    for root in diagnosis.root_causes:
        # As wide as the terminal, each line cut with an ellipsis only where the screen ends.
        line = Text.assemble(("root cause ", "bold"), problem_text(root.problem), ": ",
                             shown(root.problem.message, one_line=True), no_wrap=True, overflow="ellipsis")
        sure = [s for s in root.symptoms if not s.unsure]
        maybe = [s for s in root.symptoms if s.unsure]
        if sure:
            line.append("\n    explains: ", style="dim")
            line.append_text(Text(", ").join(problem_text(s.problem) for s in sure))
        if maybe:   # the log may come from a run without this cause's precondition: said, not asserted
            line.append("\n    may explain: ", style="dim")
            line.append_text(Text(", ").join(problem_text(s.problem) for s in maybe))
            line.append(f" — {shown(maybe[0].unsure or '', one_line=True)}", style="dim")
        lines.append(line)
    for u in diagnosis.unexplained:
        lines.append(Text.assemble(problem_text(u.problem), (" — cause not found among the checks; possible: ", "dim"),
                                   shown(", ".join(u.possible_causes))))
    if diagnosis.next_step:
        lines.append(Text.assemble(("next: ", "bold"), (shown(diagnosis.next_step), "cyan")))
    return Group(*lines) if lines else Text("")


class DiagnosisPanel(Static):
    """Above the checks table: the root causes once the checks are done."""

    def show(self, diagnosis: Diagnosis | None) -> None:
        self.display = bool(diagnosis and (diagnosis.root_causes or diagnosis.unexplained))
        self.update(diagnosis_renderable(diagnosis))


def links_renderable(check_id: str, diagnosis: Diagnosis | None) -> RenderableType | None:
    """For the finding screen: what this finding explains, and what explains it."""
    if diagnosis is None:
        return None
    rows: list[RenderableType] = []
    for s in diagnosis.explains(check_id):
        rows.append(Text.assemble(("may explain " if s.unsure else "explains ", "bold"), problem_text(s.problem),
                                  f": {s.problem.message}", (f"\n    why: {s.why}", "dim"),
                                  (f"\n    unsure: {s.unsure}" if s.unsure else "", "dim")))
    for cause, why, doubt in diagnosis.explained_with_doubt(check_id):
        rows.append(Text.assemble(("may be explained by " if doubt else "explained by ", "bold"), problem_text(cause),
                                  f": {cause.message}", (f"\n    why: {why}", "dim"),
                                  (f"\n    unsure: {doubt}" if doubt else "", "dim"),
                                  (f"\n    next: {cause.next_step}", "cyan")))
    for u in diagnosis.unexplained:
        if u.problem.check_id == check_id:
            rows.append(Text.assemble(("cause not found; ", "bold"), f"possible: {', '.join(u.possible_causes)}",
                                      (f"\n    why: {u.why}", "dim")))
    return Group(*rows) if rows else None
