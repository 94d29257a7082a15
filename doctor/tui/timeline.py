"""Where the time went (`gpu-doctor timeline PATH`) as a screen: from the palette or after a run."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from doctor.sanitize import shown


class TimelineScreen(Screen[None]):
    """The overlap-aware time breakdown of the traces under a folder."""

    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back")]

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.text: str | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="timeline"):
            yield Static(Text(shown(f"gpu-doctor timeline {self.folder}"), style="bold"))
            yield Static(Text("reading the traces…", style="dim"), id="timeline-text")
        yield Footer()

    def on_mount(self) -> None:
        self.timeline_worker()

    @work(thread=True, exclusive=True, exit_on_error=False, group="timeline",
          description="reading the traces for the time breakdown")
    def timeline_worker(self) -> None:
        from doctor.artifacts.discover import discover
        from doctor.tui.launch import timeline_text

        if not discover(self.folder):
            text = (f"No Score-P measurement in {self.folder} yet: nothing has run here under Score-P. "
                    "Press l and choose Score-P to make one; the time breakdown reads the traces it leaves.")
        else:
            text = timeline_text(self.folder, width=max(80, self.app.size.width - 4))
        self.app.call_from_thread(self.show, text)

    def show(self, text: str) -> None:
        self.text = text
        self.query_one("#timeline-text", Static).update(Text(shown(text)))
