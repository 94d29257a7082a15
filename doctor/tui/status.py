"""How a check's status looks on every screen: one colour and one icon per status."""

from __future__ import annotations

from rich.text import Text

from doctor.model import Status

STATUS_STYLE = {
    Status.PASS: "green", Status.WARN: "yellow", Status.FAIL: "bold red",
    Status.SKIP: "dim", Status.UNKNOWN: "magenta", Status.TIMEOUT: "bold magenta",
}
STATUS_ICON = {
    Status.PASS: "✔", Status.WARN: "▲", Status.FAIL: "✖",
    Status.SKIP: "·", Status.UNKNOWN: "?", Status.TIMEOUT: "⏱",
}


def status_text(status: Status | None) -> Text:
    """The status as the tables show it: icon and word in the status's colour (pending if None)."""
    if status is None:
        return Text("… pending", style="dim italic")
    return Text(f"{STATUS_ICON[status]} {status.value}", style=STATUS_STYLE[status])
