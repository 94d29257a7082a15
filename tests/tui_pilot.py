"""Driving the app with Textual's Pilot on a loaded machine: wait for what the user would see.

Pilot's own settling (`press`, `click`, `pause()`) guesses that the app is idle when its
process uses little CPU; on a machine whose cores are busy elsewhere the process is merely
starved, and the guess returns before the key was handled. So every step here waits on a
condition — a screen on top and mounted, a widget laid out, a value shown, a new plan, a new
run — with a generous ceiling that only a broken app reaches. Nothing waits a fixed time.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from rich.console import Console
from textual.widget import Widget
from textual.widgets import Static

from doctor.tui.app import DoctorApp

# Only a broken app reaches this: a quiet machine needs a few seconds for the slowest step.
CEILING_S = 240.0
S = TypeVar("S")


def plain(shown: Any, width: int = 200) -> str:
    """What a Static (or a Rich renderable) shows, as plain text: markup applied, styles dropped."""
    renderable = shown.content if isinstance(shown, Static) else shown
    with open(os.devnull, "w") as sink:
        console = Console(width=width, record=True, file=sink, color_system=None)
        console.print(renderable)
        return console.export_text()


def run_app(app: DoctorApp, body: Callable[[Any], Awaitable[None]], size: tuple[int, int] = (140, 45)) -> None:
    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await body(pilot)
    asyncio.run(main())


async def until(pilot: Any, predicate: Callable[[], object], what: str = "", timeout: float = CEILING_S) -> None:
    """Let the app run until predicate() holds (each poll yields to the app; no fixed pause)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or predicate}")
        await pilot.pause(0.05)


def mounted(app: DoctorApp, kind: type[Any]) -> bool:
    """A `kind` screen is on top and composed (its widgets can be queried)."""
    return isinstance(app.screen, kind) and app.screen.is_mounted


async def screen_up(pilot: Any, app: DoctorApp, kind: type[S]) -> S:
    await until(pilot, lambda: mounted(app, kind), what=f"the {kind.__name__}")
    return app.screen  # type: ignore[return-value]


async def checks_done(pilot: Any, app: DoctorApp) -> None:
    await until(pilot, lambda: app.run_result is not None and not app.checks_running, what="the checks")


async def rerun_done(pilot: Any, app: DoctorApp, before: object) -> None:
    """Wait for the run that replaces `before` (a stale run must not pass for the new one)."""
    await until(pilot, lambda: app.run_result is not None and app.run_result is not before
                and not app.checks_running, what="the checks to run again")


async def open_screen(pilot: Any, app: DoctorApp, key: str, kind: type[S]) -> S:
    """Wait for the checks, press `key`, wait until a mounted `kind` screen is on top; return it."""
    await checks_done(pilot, app)
    await pilot.press(key)
    return await screen_up(pilot, app, kind)


def laid_out(widget: Widget) -> bool:
    return widget.region.area > 0


async def click(pilot: Any, widget: Widget) -> None:
    """Click `widget` once it has a place on the screen (a click before layout hits nothing)."""
    await until(pilot, lambda: laid_out(widget), what=f"{widget!r} on screen")
    await pilot.click(widget)


async def focus_on(pilot: Any, app: DoctorApp, widget: Widget) -> None:
    """Wait until keys go to `widget` (focus moves after the event that asked for it)."""
    await until(pilot, lambda: app.focused is widget, what=f"the focus on {widget!r}")


async def confirm_apply(pilot: Any, app: DoctorApp) -> None:
    """`a`, wait for the confirmation, `y`, wait until it is gone (a `y` before it would be lost)."""
    from doctor.tui.fix import ConfirmScreen

    await pilot.press("a")
    await screen_up(pilot, app, ConfirmScreen)
    await pilot.press("y")
    await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="the confirmation to close")


async def palette(pilot: Any, app: DoctorApp, query: str) -> None:
    """Type `query` into the command palette and run the entry it highlights once the search ended."""
    from textual.command import CommandInput, CommandList, CommandPalette

    await pilot.press("ctrl+p")
    shown = await screen_up(pilot, app, CommandPalette)
    box = shown.query_one(CommandInput)
    await focus_on(pilot, app, box)
    await pilot.press(*query)
    hits = shown.query_one(CommandList)

    def found() -> bool:
        if box.value != query or hits.highlighted is None:
            return False
        if any(w.is_running for w in app.workers if w.node is shown):
            return False  # still searching: the order may change
        prompt = hits.get_option_at_index(hits.highlighted).prompt
        return query.lower() in plain(prompt).lower()

    await until(pilot, found, what=f"the palette to find {query!r}")
    await pilot.press("enter")
    await until(pilot, lambda: not isinstance(app.screen, CommandPalette), what="the palette to close")
