"""The interactive assistant: `gpu-doctor [PATH]`.

The app renders what the engine returns; it never measures anything itself.
Checks run in a thread worker that posts small messages as each check ends.
Build it with `make_app(case, options)` so tests can drive it with Pilot.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Static

from doctor.case import Case
from doctor.diagnosis import Diagnosis, diagnose
from doctor.model import CheckResult, Status
from doctor.playbook import load_playbook
from doctor.runner import CheckFinished, CheckStarted, Event, Run, run_checks
from doctor.sanitize import shown
from doctor.tui.diagnosis_view import DiagnosisPanel
from doctor.tui.options import Options
from doctor.tui.status import STATUS_ICON, STATUS_STYLE, status_text
from doctor.verdict import blocking, counts, exit_code, not_checked


class CheckUpdate(Message):
    """A check started or finished (posted from the checks worker)."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class ChecksDone(Message):
    def __init__(self, run: Run) -> None:
        super().__init__()
        self.run = run


class DoctorCommands(Provider):
    """Command palette entries for the main actions."""

    def actions(self) -> list[tuple[str, Callable[[], Any], str]]:
        app = self.app
        assert isinstance(app, DoctorApp)
        return [
            ("Re-run checks", app.action_rerun, "Run every check of the playbook again"),
            ("Fix: preview and apply remedies", app.action_fix, "Choose remedies, preview diffs, apply"),
            ("Undo applied remedies", app.action_undo, "Restore files from the journal"),
            ("Launch the per-rank run", app.action_launch, "Start the fixed run with live status"),
            ("Timeline: where the time went", app.action_timeline,
             "gpu-doctor timeline on the job folder's traces, overlap-aware"),
            ("Export a report", app.action_report, "Write a redacted report file"),
            ("Help: keys", app.action_help, "Every key of this screen"),
        ]

    async def discover(self) -> Hits:
        """What an empty palette shows first: gpu-doctor's own actions (checks are found by typing an ID)."""
        for name, action, help_text in self.actions():
            yield DiscoveryHit(name, action, help=help_text)

    async def search(self, query: str) -> Hits:
        app = self.app
        assert isinstance(app, DoctorApp)
        entries = self.actions()
        from doctor.runner import order_checks

        for chk in order_checks(app.playbook_checks()):  # every check by its ID: "SCP002"
            result = app.results.get(chk.id)
            entries.append((f"{chk.id} {chk.title}", partial(app.open_check, chk.id),
                            f"{result.status.value}: {result.message}" if result else "not finished yet"))
        matcher = self.matcher(query)
        for name, action, help_text in entries:
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), action, help=help_text)


class ChecksTable(DataTable[Any]):
    """The overview's table: its finding column takes the width left whenever the table's changes."""

    def on_resize(self) -> None:
        # The table's own size, after layout: the app hears a terminal resize before that.
        app = self.app
        if isinstance(app, DoctorApp):
            app.fit_message_column()


class DoctorApp(App[int]):
    """Overview of every check by layer, live; drill into findings, fix, launch, report."""

    CSS_PATH = "doctor.tcss"
    TITLE = "gpu-doctor"
    COMMANDS = App.COMMANDS | {DoctorCommands}
    # The footer shows these in this order and cuts what does not fit: at 80 columns the flow's
    # keys, help and quit stay. ctrl+c is in the help, not the footer (q quits, s stops ranks).
    BINDINGS = [
        Binding("enter", "open", "Details", show=False),
        Binding("f", "fix", "Fix"),
        Binding("u", "undo", "Undo"),
        Binding("l", "launch", "Launch"),
        Binding("e", "report", "Export report"),
        Binding("question_mark,f1", "help", "Help"),
        Binding("q", "quit", "Quit"),
        Binding("r", "rerun", "Re-run"),
        Binding("p", "problems_only", "Problems only"),
        Binding("ctrl+c", "stop_or_quit", "Stop/Quit", priority=True, show=False),
    ]

    def __init__(self, case: Case, options: Options) -> None:
        super().__init__()
        self.case = case
        self.options = options
        self.results: dict[str, CheckResult] = {}
        self.run_result: Run | None = None
        self.checks_running = False
        self.diagnosis: Diagnosis | None = None
        self.problems_only = False
        self.sub_title = shown(case.root, one_line=True) if case.root else "this node"

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="verdict")
        yield DiagnosisPanel("", id="diagnosis")
        yield ChecksTable(id="checks", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#checks", DataTable)
        table.add_column("layer", key="layer", width=13)
        table.add_column("check", key="check", width=7)
        table.add_column("status", key="status", width=11)
        table.add_column("finding", key="message", width=60)
        self._install_signal_handlers()
        self.call_after_refresh(self.fit_message_column)
        for note in self.options.notes:
            self.notify(shown(note.removeprefix("gpu-doctor: ")), markup=False, timeout=8)
        self.action_rerun()


    def fit_message_column(self) -> None:
        """Give the finding column whatever width the other columns leave."""
        tables = self.query("#checks")
        if not tables:
            return
        table = tables.first(DataTable)
        column = next((c for k, c in table.columns.items() if k.value == "message"), None)
        if column is None or not table.size.width:
            return
        others = sum(c.get_render_width(table) for c in table.columns.values() if c is not column)
        column.auto_width = False
        column.width = max(20, table.size.width - others - 2 * table.cell_padding - 2)
        table.refresh()

    def _install_signal_handlers(self) -> None:
        """SIGTERM/SIGHUP: stop running ranks and exit cleanly (ctrl+c is a key here)."""
        import asyncio

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                loop.add_signal_handler(sig, lambda: self.call_later(self.shutdown_from_signal))
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
                pass

    async def shutdown_from_signal(self) -> None:
        await self.stop_ranks()
        self.exit(130, return_code=130)

    async def stop_ranks(self) -> None:
        """Stop every running rank (overridden by the launch screen when active)."""
        launch = getattr(self, "launch_screen", None)
        if launch is not None:
            await launch.stop_run()

    def run_in_progress(self, what: str) -> bool:
        """True (and says so) while ranks run: the job's files must not change under them."""
        launch = getattr(self, "launch_screen", None)
        if launch is not None and launch.running:
            self.notify(f"A run is going: stop it (s) before you {what}.", severity="warning")
            return True
        return False

    def playbook_checks(self) -> list[str]:
        return list(load_playbook(self.options.playbook).checks)

    def action_rerun(self) -> None:
        if self.checks_running or self.run_in_progress("re-run the checks"):
            return
        table = self.query_one("#checks", DataTable)
        table.clear()
        self.results.clear()
        self.run_result = None  # until this run ends, the fix flow waits: no plan from stale findings
        self.diagnosis = None
        self.query_one(DiagnosisPanel).show(None)
        from doctor.runner import order_checks

        for chk in order_checks(self.playbook_checks()):
            table.add_row(Text(chk.layer, style="bold"), chk.id, status_text(None),
                          Text(chk.title, style="dim"), key=chk.id)
        self.update_verdict()
        self.run_checks_worker()

    @work(thread=True, exclusive=True, exit_on_error=False, group="checks",
          description="running the playbook's checks")
    def run_checks_worker(self) -> Run:
        self.checks_running = True
        try:
            run = run_checks(self.case, self.playbook_checks(), budget_s=self.options.budget_s,
                             on_event=self._post_check_event,
                             playbook=self.options.playbook, mode="interactive")
        finally:
            self.checks_running = False
        self.post_message(ChecksDone(run))
        return run

    def _post_check_event(self, event: Event) -> None:
        self.post_message(CheckUpdate(event))  # post_message is thread-safe

    @on(CheckUpdate)
    def show_check(self, message: CheckUpdate) -> None:
        table = self.query_one("#checks", DataTable)
        ev = message.event
        if isinstance(ev, CheckStarted):
            table.update_cell(ev.check_id, "status", Text("⟳ running", style="cyan"))
        elif isinstance(ev, CheckFinished):
            r = ev.result
            self.results[r.check_id] = r
            table.update_cell(r.check_id, "status", status_text(r.status))
            table.update_cell(r.check_id, "message", Text(shown(r.message, one_line=True)), update_width=False)
            self.update_verdict()

    @on(ChecksDone)
    def checks_done(self, message: ChecksDone) -> None:
        self.run_result = message.run
        self.update_verdict()
        self.diagnosis = diagnose(message.run)
        self.query_one(DiagnosisPanel).show(self.diagnosis)
        self.show_rows()
        self.focus_first_problem()

    def first_problem(self) -> str | None:
        """The row to open on: the first root cause, else the worst finding (never a skipped node row)."""
        if self.diagnosis is not None and self.diagnosis.root_causes:
            return str(self.diagnosis.root_causes[0].problem.check_id)
        bad = [r for r in self.results.values() if r.status not in (Status.PASS, Status.SKIP)]
        return max(bad, key=lambda r: r.status.rank).check_id if bad else None

    def focus_first_problem(self) -> None:
        table = self.query_one("#checks", DataTable)
        first = self.first_problem()
        if first is not None and first in [k.value for k in table.rows]:
            table.move_cursor(row=table.get_row_index(first))

    def show_rows(self) -> None:
        """All rows in layer order, or (problems only) the findings above pass/skip."""
        from doctor.runner import order_checks

        table = self.query_one("#checks", DataTable)
        table.clear()
        for chk in order_checks(self.playbook_checks()):
            r = self.results.get(chk.id)
            if self.problems_only and (r is None or r.status in (Status.PASS, Status.SKIP)):
                continue
            table.add_row(Text(chk.layer, style="bold"), chk.id, status_text(r.status if r else None),
                          Text(shown(r.message, one_line=True)) if r else Text(chk.title, style="dim"), key=chk.id)

    def action_problems_only(self) -> None:
        if self.checks_running:
            return
        self.problems_only = not self.problems_only
        self.show_rows()
        self.focus_first_problem()
        self.notify("Problems only" if self.problems_only else "Every check")

    def update_verdict(self) -> None:
        c = counts(list(self.results.values()))
        parts = [Text.assemble((f"{STATUS_ICON[s]} {c[s.value]} {s.value}", STATUS_STYLE[s]), "  ")
                 for s in Status if c[s.value]]
        if self.run_result is not None and not self.checks_running:
            bad = exit_code(self.run_result, self.options.fail_on)
            unread = not_checked(self.run_result)  # the job was not read: not ready, and not a finding either
            if bad and (unread is None or blocking(self.run_result.results, self.options.fail_on)):
                head = Text(" NOT READY ", style="bold white on red")
            elif unread is not None or nothing_checked(self.run_result):
                head = Text(f" {unread[0] if unread else 'NOTHING CHECKED'} ", style="bold black on grey70")
                why = nothing_checked_why(self.case) if nothing_checked(self.run_result) or unread is None else unread[1]
                parts.append(Text(why, style="dim"))
            else:
                head = Text(" READY ", style="bold white on green")
        else:
            head = Text(" CHECKING ", style="bold black on yellow")
        self.query_one("#verdict", Static).update(Text.assemble(head, "  ", *parts))

    def selected_result(self) -> CheckResult | None:
        table = self.query_one("#checks", DataTable)
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return self.results.get(str(key))

    @on(DataTable.RowSelected, "#checks")
    def row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def open_check(self, check_id: str) -> None:
        """Move to the check's row and open it (the palette's "SCP002 ...")."""
        table = self.query_one("#checks", DataTable)
        try:
            table.move_cursor(row=table.get_row_index(check_id))
        except Exception:  # a check of another playbook: not in this table
            self.notify(f"{check_id} is not in the {self.options.playbook} playbook.", severity="warning")
            return
        self.action_open()

    def action_help(self) -> None:
        from doctor.tui.help import HelpScreen, screen_keys

        if isinstance(self.screen, HelpScreen):
            return
        screen = self.screen
        title = ("the overview" if screen is self.screen_stack[0]
                 else type(screen).__name__.removesuffix("Screen").lower())
        self.push_screen(HelpScreen(title, screen_keys(screen.active_bindings)))

    def action_timeline(self) -> None:
        from doctor.tui.timeline import TimelineScreen

        self.push_screen(TimelineScreen(self.case.root or Path.cwd()))

    def action_open(self) -> None:
        result = self.selected_result()
        if result is None:
            self.notify("This check has not finished yet.", severity="warning")
            return
        from doctor.tui.finding import FindingScreen

        job = self.run_result.facts.peek("job") if self.run_result else None
        self.push_screen(FindingScreen(result, self.case, self.diagnosis, job))

    def action_fix(self) -> None:
        from doctor.tui.fix import FixScreen

        if self.run_in_progress("change the job's files"):
            return
        if self.run_result is None:
            self.notify("Wait for the checks to finish first.", severity="warning")
            return
        self.push_screen(FixScreen(self.case, self.run_result), self._after_fix)

    def _after_fix(self, changed: bool | None) -> None:
        if changed:
            from doctor.tui.finding import FindingScreen

            while isinstance(self.screen, FindingScreen):  # its result is stale now: back to the live overview
                self.pop_screen()
            self.action_rerun()

    def action_undo(self) -> None:
        from doctor.tui.fix import undo_all

        if self.run_in_progress("undo a fix"):
            return
        self.notify(shown(undo_all(self.case)), markup=False)
        self.action_rerun()

    def action_launch(self) -> None:
        from doctor.tui.launch import LaunchScreen

        running = getattr(self, "launch_screen", None)
        if running is not None and running.running:  # one run at a time; its screen keeps the ranks
            self.notify("A run is going: stop it (s) before starting another.", severity="warning")
            return
        facts = self.run_result.facts.computed() if self.run_result else None
        screen = LaunchScreen(self.case, self.options, facts)
        self.launch_screen = screen
        self.push_screen(screen)

    def action_report(self) -> None:
        from doctor.tui.report import ReportScreen

        facts = self.run_result.facts.computed() if self.run_result else None
        self.push_screen(ReportScreen(self.case, self.options, facts))

    async def action_quit(self) -> None:
        """q and the palette's Quit: stop running ranks first (else the app would wait for them, blank)."""
        await self.stop_ranks()
        self.exit()

    async def action_stop_or_quit(self) -> None:
        launch = getattr(self, "launch_screen", None)
        if launch is not None and launch.running:
            await launch.stop_run()
            self.notify("Stopping every rank…")
            return
        self.exit(int(exit_code(self.run_result, self.options.fail_on)) if self.run_result else 0)


def nothing_checked(run: Run) -> bool:
    """Every check skipped: there was nothing to examine here, which is not "ready"."""
    return all(r.status == Status.SKIP for r in run.results)


def nothing_checked_why(case: Case) -> str:
    where = f"no job found in {case.root}" if case.root else "no job folder"
    return f"every check was skipped: {where} and no GPU to probe; open a job folder: gpu-doctor PATH"


def make_app(case: Case, options: Options | None = None) -> DoctorApp:
    """Build the app without running it (tests use `app.run_test()`)."""
    return DoctorApp(case, options or Options())


def main(case: Case, options: Options) -> int:
    """Run the app on the case until it quits; its exit code (as the gate's, 130 on a signal)."""
    result = make_app(case, options).run()
    return int(result or 0)
