"""Finding detail: the message, the evidence (code highlighted), the catalogue entry, the remedies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.markdown import Markdown
from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from doctor import registry, safeopen
from doctor.case import Case
from doctor.catalogue_cli import doc_markdown
from doctor.diagnosis import Diagnosis
from doctor.model import CheckResult, Evidence
from doctor.sanitize import shown
from doctor.tui.diagnosis_view import links_renderable
from doctor.tui.status import status_text

CONTEXT_LINES = 3
MAX_SOURCE_BYTES = 2_000_000


def evidence_renderable(ev: Evidence, root: Path | None = None) -> RenderableType:
    """An evidence line; with file:line, the source around it, highlighted.

    Evidence names files relative to the job folder (`root`) or absolutely.
    """
    head = Text.assemble(("• ", "bold"), (shown(f"{ev.label}: ") if ev.label else "", "bold"), shown(ev.text))
    if not ev.file or not ev.line:
        if ev.file:
            head.append(shown(f"  ({ev.file})"), style="dim")
        return head
    path = Path(ev.file)
    if not path.is_absolute() and root is not None:
        path = root / path
    lexer = "python" if path.suffix == ".py" else ("bash" if path.suffix in (".sh", ".sbatch", "") else "text")
    try:
        code = safeopen.read_text(path, MAX_SOURCE_BYTES)  # a FIFO would block the screen
    except OSError:
        return Text.assemble(head, (shown(f"  {ev.file}:{ev.line}"), "dim"))
    first = max(1, ev.line - CONTEXT_LINES)
    last = ev.line + CONTEXT_LINES
    syntax = Syntax(shown(code), lexer, line_numbers=True, line_range=(first, last),
                    highlight_lines={ev.line}, theme="ansi_dark", word_wrap=True)
    return Group(Text.assemble(head, (shown(f"  {ev.file}:{ev.line}"), "cyan")), syntax)


class FindingScreen(Screen[None]):
    """One check's result in full."""

    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back"), Binding("f", "app.fix", "Fix")]

    def __init__(self, result: CheckResult, case: Case, diagnosis: Diagnosis | None = None,
                 job: Any = None) -> None:
        super().__init__()
        self.result = result
        self.case = case
        self.diagnosis = diagnosis
        self.job = job  # the parsed job folder (the `job` fact), for the job layers

    def compose(self) -> ComposeResult:
        r = self.result
        yield Header()
        with VerticalScroll(id="finding"):
            yield Static(Text.assemble((f"{r.check_id} ", "bold"), (r.title, "bold"), "  ",
                                       status_text(r.status)), id="finding-title")
            yield Static(Text(shown(r.message)), id="finding-message")
            links = links_renderable(r.check_id, self.diagnosis)
            if links is not None:
                yield Static(Text("Diagnosis", style="bold underline"))
                yield Static(links, id="finding-links")
            yield Static(Text("Evidence", style="bold underline"))
            for f in r.findings:
                if len(r.findings) > 1:
                    yield Static(Text.assemble(status_text(f.status), " ", shown(f.message)))
                for ev in f.evidence:
                    yield Static(evidence_renderable(ev, self.case.root), classes="evidence")
            if not any(f.evidence for f in r.findings):
                yield Static(Text("(no evidence recorded)", style="dim"))
            launch = self.launch_renderable()
            if launch is not None:
                yield Static(Text("How gpu-doctor read your launch", style="bold underline"))
                yield Static(launch, id="launch-read")
            yield Static(Text("Remedies", style="bold underline"))
            yield Static(self.remedies_renderable(), id="remedies")
            yield Static(Text("About this check", style="bold underline"))
            doc = registry.get_check(r.check_id).doc
            yield Static(Markdown(doc_markdown(doc)) if doc else Text("(no documentation)"), id="explain")
        yield Footer()

    def launch_renderable(self) -> RenderableType | None:
        """The process tree the job checks read (job script -> launcher -> wrapper -> program)."""
        from doctor.jobfolder.model import Job

        if not isinstance(self.job, Job) or self.result.layer in ("node", "interconnect"):
            return None
        from doctor.jobfolder.processes import launch_lines

        lines = launch_lines(self.job)
        return Text(shown("\n".join(lines)), style="dim") if lines else None

    def remedies_renderable(self) -> RenderableType:
        rows: list[RenderableType] = []
        for rid in self.result.remedies:
            rem = registry.remedy_for(rid)
            if rem is None:
                rows.append(Text(f"{rid}"))
                continue
            rows.append(Text.assemble((f"{rid} ", "bold"), (f"[{rem.safety.value}] ", "cyan"), rem.title))
            for step in rem.steps:
                rows.append(Text(shown(f"    {step}"), style="dim"))
        from doctor.tui.fix import preview_text

        diff = preview_text(self.case, [self.result])
        if diff:
            rows.append(Syntax(shown(diff), "diff", theme="ansi_dark", word_wrap=True))
        return Group(*rows) if rows else Text("none: this check needs no remedy", style="dim")
