"""Fix flow: choose remedies (safe ones preselected), preview the diff, confirm, apply,
see each remedy re-checked (`verified` or not), undo.

Everything here drives the remedy engine (`doctor.remedy`); the screen only renders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.segment import Segment
from rich.syntax import Syntax
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.strip import Strip
from textual.widgets import Button, Checkbox, Footer, Header, SelectionList, Static
from textual.widgets.option_list import OptionDoesNotExist
from textual.widgets.selection_list import Selection
from textual.worker import Worker, get_current_worker

from doctor.case import Case
from doctor.model import CheckResult, Safety
from doctor.remedy.verify import JOB_LAYERS
from doctor.sanitize import shown
from doctor.wording import count

if TYPE_CHECKING:
    from doctor.remedy.model import Plan, RemedyPlan
    from doctor.runner import Run


def plan_for(case: Case, findings: list, facts: object = None) -> Plan:  # type: ignore[type-arg]
    from doctor.remedy.planner import make_plan

    return make_plan(case, findings, unsafe=True, facts=facts)


def preview_text(case: Case, results: list[CheckResult]) -> str:
    """The unified diff the remedies for `results` would apply (empty when none or no job folder)."""
    if case.root is None or not any(r.remedies for r in results):
        return ""
    try:
        plan = plan_for(case, [f for r in results for f in r.findings])
    except Exception as exc:  # a preview must never take the detail screen down
        return f"# could not plan: {type(exc).__name__}: {exc}\n"
    return plan.diff()


def undo_all(case: Case) -> str:
    """Undo the latest applied fix in the job folder; a one-line account."""
    if case.root is None:
        return "no job folder: nothing to undo"
    from doctor.remedy.apply import undo
    from doctor.remedy.model import RemedyError

    try:
        result = undo(case.root)
    except RemedyError as exc:
        return f"undo refused: {exc}"
    if not result.txs:
        return "nothing to undo"
    return (f"undone {', '.join(result.txs)}: {count(len(result.restored), 'file')} restored, "
            f"{count(len(result.removed), 'created file')} removed")


@dataclass(frozen=True)
class Verified:
    remedy_id: str
    verified: bool | None
    note: str


class FixApplied(Message):
    def __init__(self, written: int, tx: str | None, verified: list[Verified], error: str = "") -> None:
        super().__init__()
        self.written = written
        self.tx = tx
        self.verified = verified
        self.error = error


class ConfirmScreen(ModalScreen[bool]):
    """Yes/no before anything is written."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="report-form"):
            yield Static(Text(self.question), id="confirm-question")  # wraps: the whole list is shown
            with Horizontal():
                yield Button("Apply (y)", variant="warning", id="yes")
                yield Button("Cancel (n)", id="no")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


def remedy_label(rp: RemedyPlan) -> Text:
    style = {"safe": "green", "unsafe": "yellow", "manual": "cyan"}[rp.safety.value]
    files = ", ".join(sorted({c.path.name for c in rp.changes}))
    return Text.assemble((f"[{rp.safety.value}] ", style), (rp.remedy_id, "bold"), f"  {rp.title}",
                         (shown(f"  ({files})", one_line=True) if files else "", "dim"))


class RemedyList(SelectionList[str]):
    """A SelectionList whose unselected boxes are empty and plainly visible (Textual's draw
    an X in a colour close to the background, which reads as selected on many terminals)."""

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        try:
            selection = self.get_option_at_index(self.scroll_offset.y + y)
        except OptionDoesNotExist:
            return strip
        if selection.value in self.selected:
            return strip
        segments = list(strip)
        if len(segments) > 1 and segments[1].text == Checkbox.BUTTON_INNER:
            segments[1] = Segment(" ", segments[1].style)
        return Strip(segments, strip.cell_length)


class FixScreen(Screen[bool]):
    """Choose, preview, apply, verify, undo. Dismisses with True when files changed."""

    BINDINGS = [
        Binding("escape", "close", "Back"),
        Binding("a", "apply", "Apply selected"),
        Binding("u", "undo", "Undo last fix"),
    ]

    def __init__(self, case: Case, run: Run) -> None:
        super().__init__()
        self.case = case
        self.run_result = run
        # The node's findings (GPU003 on this host...): `fix` reads them from --findings; the
        # job folder's own are checked afresh for every plan, so the list is never stale.
        self.node_findings = [f for f in run.findings if f.layer not in JOB_LAYERS]
        self.job_run: Run | None = None
        self.plan: Plan | None = None
        self.unsafe_plans: dict[str, RemedyPlan] = {}
        self.changed = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("planning remedies…", id="fix-summary")
        yield Static("", id="fix-result")
        yield RemedyList(id="fix-list")
        with VerticalScroll(id="fix-preview"):
            yield Static("", id="fix-diff")
        yield Footer()

    def on_mount(self) -> None:
        if self.case.root is None:
            self.query_one("#fix-summary", Static).update("No job folder: node problems need the manual "
                                                         "steps shown in each finding.")
            return
        self.plan_worker()

    @work(thread=True, exclusive=True, exit_on_error=False, group="fix", description="planning remedies")
    def plan_worker(self) -> None:
        """The plan `gpu-doctor fix PATH` shows (checks run now), and the unsafe remedies' own plans."""
        from doctor.remedy.planner import make_plan
        from doctor.remedy.verify import check_and_plan

        worker = get_current_worker()
        run, plan = check_and_plan(self.case, extra=self.node_findings)
        full = make_plan(self.case, run.findings + self.node_findings, unsafe=True, facts=run.facts)
        unsafe = {rp.remedy_id: rp for rp in full.remedies if rp.safety == Safety.UNSAFE}
        self.app.call_from_thread(self.show_latest_plan, worker, run, plan, unsafe)

    def show_latest_plan(self, worker: Worker[None], run: Run, plan: Plan, unsafe: dict[str, RemedyPlan]) -> None:
        """Show a plan unless a newer one was asked for since (an undo pressed while the plan after
        an apply was still being made): the older plan would describe files that changed since."""
        if worker.is_cancelled:  # exclusive: a newer plan_worker cancelled this one, and its plan follows
            return
        self.show_plan(run, plan, unsafe)

    def offered(self) -> list[RemedyPlan]:
        """What the list offers: the plan's ready remedies, then the unsafe ones `fix` skips."""
        if self.plan is None:
            return []
        ready = [rp for rp in self.plan.remedies if rp.status == "ready"]
        unsafe = [self.unsafe_plans[rp.remedy_id] for rp in self.plan.skipped
                  if self.unsafe_plans.get(rp.remedy_id, rp).status == "ready"]
        return ready + unsafe

    def show_plan(self, run: Run, plan: Plan, unsafe: dict[str, RemedyPlan]) -> None:
        self.job_run, self.plan, self.unsafe_plans = run, plan, unsafe
        sel = self.query_one("#fix-list", SelectionList)
        sel.clear_options()
        offered = self.offered()
        for rp in offered:
            sel.add_option(Selection(remedy_label(rp), rp.remedy_id, rp.safety == Safety.SAFE))
        self.show_preview()
        if offered:
            sel.highlighted = 0  # a visible cursor, so the first space or arrow acts on a row
            sel.focus()

    def summary_text(self, chosen: set[str]) -> str:
        """What is selected of what is offered: the count says what `a` would apply."""
        offered = self.offered()
        if not offered:
            return "Nothing to apply: every remedy here is applied or needs manual steps (below).  u: undo"
        safe = sum(rp.safety == Safety.SAFE for rp in offered)
        manual = [rp for rp in self.manual() if rp.steps]
        picked = sum(rp.remedy_id in chosen for rp in offered)
        return (f"{picked} of {count(len(offered), 'remedy')} selected to apply"
                + (f" (the {safe} safe ones preselected; unsafe ones edit your code)" if safe else "")
                + (f"; {count(len(manual), 'remedy needs', 'remedies need')} manual steps (below)"
                   if manual else "")
                + ".  space: toggle  a: apply  u: undo")

    def manual(self) -> list[RemedyPlan]:
        """The remedies with steps to follow by hand (and unsafe ones that cannot apply here)."""
        if self.plan is None:
            return []
        skipped = [self.unsafe_plans.get(rp.remedy_id, rp) for rp in self.plan.skipped]
        return [rp for rp in list(self.plan.remedies) + skipped if rp.status in ("manual", "cannot")]

    @on(SelectionList.SelectedChanged, "#fix-list")
    @on(SelectionList.SelectionHighlighted, "#fix-list")
    def show_preview(self) -> None:
        if self.plan is None:
            return
        chosen = set(self.query_one("#fix-list", SelectionList).selected)
        self.query_one("#fix-summary", Static).update(self.summary_text(chosen))
        parts: list[RenderableType] = []
        for rp in self.offered():
            if rp.remedy_id in chosen:
                diff = "".join(c.diff(self.plan.root) for c in rp.changes)
                parts += [Text(f"# {rp.remedy_id} ({rp.safety.value}): {rp.title}", style="bold"),
                          Syntax(shown(diff), "diff", theme="ansi_dark", word_wrap=True)]
                if rp.note:
                    parts.append(Text(shown(f"  {rp.note}"), style="italic"))
        for rp in self.manual():
            if rp.steps:
                parts.append(Text(f"# {rp.remedy_id} ({rp.status}): {rp.title}", style="bold cyan"))
                parts += [Text(shown(f"  {i}. {s}" if i is not None else f"     {s}")) for i, s in rp.numbered_steps()]
        self.query_one("#fix-diff", Static).update(Group(*parts) if parts else Text("nothing selected",
                                                                                     style="dim"))

    def action_apply(self) -> None:
        chosen = list(self.query_one("#fix-list", SelectionList).selected)
        if not chosen:
            self.notify("Select at least one remedy (space).", severity="warning")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.query_one("#fix-result", Static).update(f"applying {count(len(chosen), 'remedy')}…")
                self.apply_worker(chosen)

        where = f"{self.case.root}/.gpu-doctor" if self.case.root else ".gpu-doctor"
        self.app.push_screen(ConfirmScreen(f"Apply {count(len(chosen), 'remedy')}?\n"
                                           + "".join(f"  {rid}\n" for rid in chosen)
                                           + f"Backups and a journal go to {where}/."), confirmed)

    @work(thread=True, exclusive=True, exit_on_error=False, group="fix", description="applying remedies")
    def apply_worker(self, chosen: list[str]) -> None:
        from doctor.remedy.apply import apply_plan
        from doctor.remedy.model import RemedyError
        from doctor.remedy.planner import make_plan
        from doctor.remedy.verify import recheck, record, verify_plan

        assert self.job_run is not None  # the list is only filled once a plan is there
        plan = make_plan(self.case, self.job_run.findings + self.node_findings, only=chosen, unsafe=True,
                         facts=self.job_run.facts)
        try:
            result = apply_plan(plan, ["gpu-doctor", "(tui)", "fix", *chosen])
        except RemedyError as exc:
            self.post_message(FixApplied(0, None, [], str(exc)))
            return
        if result.tx is None:
            self.post_message(FixApplied(0, None, [], "already applied: nothing written"))
            return
        checks = verify_plan(plan, recheck(self.case, plan))
        record(plan, result.tx, checks)
        self.post_message(FixApplied(len(result.written), result.tx,
                                     [Verified(v.remedy_id, v.verified, v.note) for v in checks]))

    @on(FixApplied)
    def show_applied(self, message: FixApplied) -> None:
        box = self.query_one("#fix-result", Static)
        if message.error:
            box.update(Text(shown(message.error), style="bold red" if message.tx is None and message.written == 0
                            and "already" not in message.error else "yellow"))
            return
        self.changed = True
        lines = [Text(f"applied ({message.tx}): {count(message.written, 'file')} written; u undoes", style="bold")]
        for v in message.verified:
            word, style = {True: ("verified", "green"), False: ("NOT verified", "bold red"),
                           None: ("not verified", "yellow")}[v.verified]
            lines.append(Text.assemble(f"  {v.remedy_id}: ", (word, style), shown(f"  {v.note}") if v.note else ""))
        box.update(Group(*lines))
        self.plan_worker()

    def action_undo(self) -> None:
        text = shown(undo_all(self.case))
        self.changed = self.changed or text.startswith("undone")
        self.query_one("#fix-result", Static).update(Text(text))
        self.notify(text, markup=False)
        self.plan_worker()

    def action_close(self) -> None:
        self.dismiss(self.changed)
