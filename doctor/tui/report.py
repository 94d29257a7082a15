"""Report export from the app: the same redacted report as `gpu-doctor report -o FILE`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from doctor.case import Case
from doctor.sanitize import shown
from doctor.tui.tickbox import Tickbox

if TYPE_CHECKING:
    from doctor.tui.options import Options


def default_report_path(case: Case) -> Path:
    folder = case.root if case.root and case.root.is_dir() else Path.cwd()
    return folder / "gpu-doctor-report.html"


def export_report(case: Case, target: Path, options: Options, *, hash_hosts: bool,
                  facts: dict[str, Any] | None) -> tuple[int, str]:
    """Write the report with the report command's own code; return (exit code, one line for the user)."""
    from doctor.report.write import ReportError, ReportSettings, write_report

    settings = ReportSettings(playbook=options.playbook, fail_on=options.fail_on, budget_s=options.budget_s,
                              hash_hosts=hash_hosts)
    try:
        written = write_report(case, target, settings, preset_facts=facts)
    except ReportError as exc:
        return 2, f"gpu-doctor report: error: {exc}"
    return written.exit_code, written.summary()


class ReportScreen(ModalScreen[Path | None]):
    """Choose where to write the report; .html, .md, .json or .tar.gz by extension."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, case: Case, options: Options, facts: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.case = case
        self.options = options
        self.facts = facts
        self.written: Path | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="report-form"):
            yield Label("Export a redacted report (.html, .md, .json or .tar.gz)")
            yield Input(str(default_report_path(self.case)), id="report-path")
            yield Tickbox("Hash host names", id="hash-hosts")
            with Horizontal():
                yield Button("Write", variant="primary", id="write")
                yield Button("Cancel", id="cancel")
            yield Static("", id="report-status")

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(self.written)

    @on(Button.Pressed, "#write")
    @on(Input.Submitted, "#report-path")
    def start_write(self) -> None:
        target = Path(self.query_one("#report-path", Input).value).expanduser()
        self.query_one("#report-status", Static).update(Text(shown(f"writing {target}…")))
        self.write_worker(target, self.query_one("#hash-hosts", Tickbox).value)

    @work(thread=True, exclusive=True, exit_on_error=False, group="report",
          description="writing the report")
    def write_worker(self, target: Path, hash_hosts: bool) -> None:
        code, words = export_report(self.case, target, self.options, hash_hosts=hash_hosts, facts=self.facts)
        self.app.call_from_thread(self.show_result, target, code, words)

    def show_result(self, target: Path, code: int, words: str) -> None:
        status = self.query_one("#report-status", Static)
        if code == 2:
            status.update(Text(shown(words or "could not write the report"), style="red"))  # paths are not markup
            return
        self.written = target
        status.update(Text(shown(words), style="green"))
        self.app.notify(shown(f"report written: {target}"), markup=False)
        self.dismiss(target)  # done: back to where the user was; the notification says where it went
