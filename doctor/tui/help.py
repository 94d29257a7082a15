"""The help screen (`?` or F1): every key the screen under it answers, and what it does."""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import ActiveBinding, Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

# Keys that widgets answer without a binding of the app's own.
WIDGET_KEYS = (
    ("↑ ↓  pgup pgdn", "move in a list or table"),
    ("enter", "open the highlighted check (its evidence, remedies and the catalogue's text)"),
    ("space", "in the fix list: select or unselect a remedy"),
    ("tab  shift+tab", "move between the fields of a form"),
    ("ctrl+p", "the command palette: actions, and every check by ID (e.g. SCP002)"),
)


def key_name(key: str) -> str:
    return {"question_mark": "?", "escape": "esc", "ctrl+c": "ctrl+c"}.get(key, key)


class HelpScreen(ModalScreen[None]):
    """A table of keys; any of esc, q, ? or F1 closes it."""

    BINDINGS = [Binding("escape,q,question_mark,f1", "close", "Close help")]

    def __init__(self, title: str, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self.title_text = title
        self.keys = keys

    def compose(self) -> ComposeResult:
        table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for key, what in self.keys:
            table.add_row(key, what)
        for key, what in WIDGET_KEYS:
            table.add_row(key, Text(what, style="dim"))
        with VerticalScroll(id="help"):
            yield Static(Text(f"Keys: {self.title_text}", style="bold underline"))
            yield Static(table)
            yield Static(Text("esc, q, ? or F1 closes this help.", style="dim"))

    def action_close(self) -> None:
        self.dismiss(None)


def screen_keys(bindings: Mapping[str, ActiveBinding]) -> list[tuple[str, str]]:
    """(keys, description) of the bindings the footer shows, and the app's own keys it leaves
    out for room (ctrl+c), one row per action."""
    rows: dict[str, tuple[str, str]] = {}
    for key, active in bindings.items():
        binding = active.binding
        if not binding.description or binding.system or not (binding.show or binding.priority):
            continue  # the widgets' own keys (cursor moves...) are summed up in WIDGET_KEYS
        have = rows.get(binding.action)
        name = key_name(key)
        rows[binding.action] = (f"{have[0]}  {name}" if have else name, binding.description)
    return list(rows.values())
