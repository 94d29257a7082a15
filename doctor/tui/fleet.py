"""The fleet screen: `gpu-doctor fleet DIR` in a terminal.

Nodes x checks: one row per node (runs, failed runs, lemon score, the current verdict) and one
column per check (failing runs of that check); `s` cycles the sort column (or click a column
header), `enter` opens the node's history, run by run. It shows what `doctor.fleet` computed;
it reads nothing itself.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from doctor.fleet.analysis import Fleet, NodeHistory
from doctor.model import Status
from doctor.sanitize import markup, shown
from doctor.tui.status import status_text

FIXED = ("node", "runs", "failed", "days", "lemon", "now")
MAX_HISTORY_ROWS = 2000


def _m(text: str) -> str:
    return markup(text, one_line=True)


def _t(text: str) -> Text:
    return Text(shown(text, one_line=True))


def _status(word: str) -> Text:
    try:
        return status_text(Status(word))
    except ValueError:
        return _t(word)


def _summary(doc: dict[str, Any]) -> str:
    now = ", ".join(_m(f["node"]) for f in doc["failing_now"]) or "none"
    lemons = ", ".join(f"{_m(x['node'])} ({x['score']:g}x)" for x in doc["lemon"]) or "none"
    flaps = ", ".join(f"{_m(x['node'])} {_m(x['check'])}" for x in doc["flapping"]) or "none"
    exclude = f"--exclude={_m(doc['exclude'])}" if doc["exclude"] else "nothing to exclude"
    drains = ", ".join(f"{_m(d['node'])} ({_m(d['tag'])})" for d in doc["drains"]) or (
        _m(doc["drains_note"] or "none"))
    return (f"[b]{doc['read']['verdicts']}[/b] verdicts from [b]{len(doc['nodes'])}[/b] nodes   "
            f"[b red]failing now[/]: {now}   [b yellow]lemon[/]: {lemons}\n"
            f"flapping: {flaps}   exclude: [b]{exclude}[/b]   drained in Slurm: {drains}")


class NodeScreen(Screen[None]):
    """One node's runs, newest first: time, job, status, the checks that failed and why."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back"), Binding("q", "app.pop_screen", "Back")]

    def __init__(self, node: NodeHistory) -> None:
        super().__init__()
        self.node = node

    def compose(self) -> ComposeResult:
        yield Header()
        n = self.node
        yield Static(_t(f"{n.node}: {len(n.runs)} runs, {len(n.failed)} failed on {n.failed_days} days. "
                        f"{n.lemon_evidence}"), id="node-summary")
        yield DataTable(id="node-runs", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#node-runs", DataTable)
        table.add_columns("start", "job", "status", "checks", "message")
        for v in reversed(self.node.runs[-MAX_HISTORY_ROWS:]):
            bad = [c for c in v.checks if c.status not in ("pass", "skip")]
            table.add_row(v.start.strftime("%Y-%m-%d %H:%M"), _t(v.job or "-"), _status(v.status),
                          _t(", ".join(f"{c.id} {c.status}" for c in bad)), _t(bad[0].message if bad else ""))
        table.focus()


class FleetScreen(Screen[None]):
    BINDINGS = [Binding("s", "sort", "Sort"), Binding("q", "app.quit", "Quit")]

    def __init__(self, doc: dict[str, Any], fleet: Fleet) -> None:
        super().__init__()
        self.doc = doc
        self.fleet = fleet
        self.checks = sorted({c.id for n in fleet.nodes for v in n.runs for c in v.checks})
        self.columns = list(FIXED) + self.checks
        self.sort_index = 2  # failed runs first
        self.by_name = {n.node: n for n in fleet.nodes}

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(_summary(self.doc), id="fleet-summary")
        yield DataTable(id="fleet-nodes", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#fleet-nodes", DataTable)
        for name in self.columns:
            table.add_column(name, key=name)
        for n in self.fleet.nodes:
            by_check = n.failures_by_check()
            now = n.current.status
            table.add_row(_t(n.node), len(n.runs), len(n.failed), n.failed_days, n.lemon_score,
                          _status(now),
                          *[by_check.get(c, 0) for c in self.checks], key=n.node)
        self._sort()
        table.focus()

    def _sort(self) -> None:
        key = self.columns[self.sort_index]
        table = self.query_one("#fleet-nodes", DataTable)
        text = key in ("node", "now")
        table.sort(key, key=(lambda v: str(v)) if text else None, reverse=not text)
        self.sub_title = f"sorted by {key}"

    def action_sort(self) -> None:
        self.sort_index = (self.sort_index + 1) % len(self.columns)
        self._sort()

    @on(DataTable.HeaderSelected, "#fleet-nodes")
    def header(self, event: DataTable.HeaderSelected) -> None:
        self.sort_index = self.columns.index(str(event.column_key.value))
        self._sort()

    @on(DataTable.RowSelected, "#fleet-nodes")
    def open_node(self, event: DataTable.RowSelected) -> None:
        node = self.by_name.get(str(event.row_key.value))
        if node is not None:
            self.app.push_screen(NodeScreen(node))


class FleetApp(App[int]):
    TITLE = "gpu-doctor fleet"
    CSS = ("#fleet-summary, #node-summary { padding: 0 1; height: auto; }\n"
           "#fleet-nodes, #node-runs { height: 1fr; }")

    def __init__(self, doc: dict[str, Any], fleet: Fleet) -> None:
        super().__init__()
        self.doc = doc
        self.fleet = fleet

    def on_mount(self) -> None:
        self.push_screen(FleetScreen(self.doc, self.fleet))


def make_fleet_app(doc: dict[str, Any], fleet: Fleet) -> FleetApp:
    """Build the app without running it (tests use `app.run_test()`)."""
    return FleetApp(doc, fleet)


def run_fleet_app(doc: dict[str, Any], fleet: Fleet) -> int:
    return int(make_fleet_app(doc, fleet).run() or 0)
