"""The newcomer's first two hours, round 3 (issue 29): what a new user meets, read as they see it.

Each test works on a copy of an example (never on the working tree's examples).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from examples_util import EXAMPLES, copy_example

REPO = Path(__file__).resolve().parents[1]
BROKEN = EXAMPLES / "scorep-ddp-broken"  # the shipped files (examples_util), not the working tree's


def gate(path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "doctor", "--check-only", *args, str(path)],
                          capture_output=True, text=True, env=env, timeout=240)


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    return copy_example("scorep-ddp-broken", tmp_path / "scorep-ddp-broken")  # never another test's state


@pytest.mark.slow
def test_a_run_without_score_p_gets_no_score_p_root_cause(broken: Path, fake_node: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocker's steps: the app, `l`, 2 ranks uninstrumented, Start, `esc`, `r`; then the gate on the same
    folder. On a host with no NVIDIA driver the ranks stop with the FP16 ValueError: TRN002 leads, and
    nothing says Score-P's CUDA adapter caused it (that run never loaded Score-P)."""
    pytest.importorskip("textual")
    from textual.widgets import Input, Select, Static
    from tui_pilot import CEILING_S, checks_done, click, open_screen, plain, rerun_done, run_app, until

    from doctor.case import Case
    from doctor.tui.app import make_app
    from doctor.tui.launch import LaunchScreen
    from doctor.tui.options import Options

    env = fake_node("no_driver")
    env["CUDA_VISIBLE_DEVICES"] = ""  # torch in the ranks sees no GPU, as on the reporter's host
    if "GPU001  skip    no NVIDIA driver" not in gate(broken, env=env).stderr:
        pytest.skip("this host has an NVIDIA driver the fake node cannot hide")
    monkeypatch.setattr(os, "environ", env)  # the ranks inherit it
    monkeypatch.chdir(broken)
    app = make_app(Case(root=broken, env=env), Options(playbook="scorep-ddp", budget_s=CEILING_S,
                                                       extra={"grace_s": 0.5}))

    async def body(pilot: Any) -> None:
        screen = await open_screen(pilot, app, "l", LaunchScreen)
        assert screen.query_one("#instrument", Select).value == "none"
        screen.query_one("#command", Input).value = "train.py --output_dir out --max_steps 50 --fp16"
        screen.query_one("#nproc", Input).value = "2"
        await click(pilot, screen.query_one("#start"))
        await until(pilot, lambda: screen.summary is not None, "the run")
        verdict = plain(screen.query_one("#launch-verdict", Static))
        assert "TRN002" in verdict, verdict
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, LaunchScreen), "the overview")
        await checks_done(pilot, app)
        before = app.run_result
        await pilot.press("r")
        await rerun_done(pilot, app, before)
        panel = plain(app.query_one("#diagnosis", Static))
        assert "root cause TRN002 fail: no GPU on this host: fp16 needs CUDA" in panel, panel
        assert "root cause SCR001" not in panel and "root cause LNC002" not in panel, panel

    run_app(app, body, size=(160, 45))
    verdict = gate(broken, env=env).stdout.strip()
    assert "root causes: TRN002 (explains ART004)" in verdict, verdict
    assert "first: TRN002 fail: no GPU on this host: fp16 needs CUDA" in verdict, verdict
    assert "Score-P's CUDA adapter" not in verdict and "root causes: SCR001" not in verdict, verdict


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_readme_test_command_passes_after_the_readme_app_steps(tmp_path: Path) -> None:
    """The README's app steps leave `.gpu-doctor/` (a launch's run folder), `gpu-doctor-report.html` and the
    launch's output in the example; the tests that read the example then still check the shipped job."""
    repo = tmp_path / "clone"
    repo.mkdir()
    for name in ("tests", "examples"):
        shutil.copytree(REPO / name, repo / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "build", ".gpu-doctor", "gpu-doctor-report*"))
    for name in ("README.md", "pyproject.toml"):
        shutil.copy2(REPO / name, repo / name)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "clone"]):
        subprocess.run([*git, *step], check=True, capture_output=True)
    job = repo / "examples" / "scorep-ddp-broken"
    # `l` (a real launch of the job's train.py), `e` (the report the app writes by default):
    subprocess.run([sys.executable, "-m", "doctor", "launch", "--nproc", "2", "--no-warmup", "--", "train.py",
                    "--output_dir", "out", "--max_steps", "2", "--fp16"], cwd=job, capture_output=True,
                   env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, timeout=240)
    subprocess.run([sys.executable, "-m", "doctor", "report", str(job), "-o", str(job / "gpu-doctor-report.html")],
                   capture_output=True, timeout=240)
    assert list((job / ".gpu-doctor" / "runs").glob("*/rank_0.log")) and (job / "gpu-doctor-report.html").is_file()
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                          "tests/test_jobfolder_examples.py", "tests/test_remedy_cli.py", "tests/test_workflow.py"],
                         cwd=repo, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:]
    assert " passed" in res.stdout and "failed" not in res.stdout


@pytest.mark.scorep
def test_post_run_judges_a_launch_by_what_it_was_started_with(broken: Path) -> None:
    """`gpu-doctor launch --instrument scorep` on a Score-P without CUDA drops --cuda itself; post-run on the
    job folder then judges those rank folders by the launch's record, not by job.sbatch's
    SCOREP_CUDA_ENABLE (no ART002 fail whose `fix --only scorep-add-cuda` has nothing to do), and counts
    the ranks that launch ran."""
    import scorep_real

    from doctor.launch.scorep import cuda_support

    env = scorep_real.scorep_env(scorep_real.require())
    if cuda_support(str(scorep_real.require() / "bin" / "scorep-config"), env) is not False:
        pytest.skip("this Score-P has CUDA support: the launch keeps --cuda")
    (broken / "tiny.py").write_text('print("step 1", flush=True)\n')
    # started from the folder above the job, as `gpu-doctor launch -- job/train.py` is
    run = scorep_real.gpu_doctor(["launch", "--instrument", "scorep", "--nproc", "2", "--no-warmup", "--",
                                  f"{broken.name}/tiny.py"], env, broken.parent)
    assert run.returncode == 0 and "measuring without --cuda" in run.stderr, run.stderr
    assert (broken / "scorep_rank_1").is_dir() and not (broken.parent / "scorep_rank_0").exists()
    res = scorep_real.gpu_doctor(["--check-only", "--playbook", "post-run", str(broken)], env, broken)
    assert res.stdout.startswith("gpu-doctor: OK on "), res.stdout + res.stderr
    assert "ART002  skip    scorep_rank_0: CUDA recording was not asked for: gpu-doctor launch under " \
           "python -m scorep --thread=pthread wrote it" in res.stderr, res.stderr
    assert "ART003  pass    all 2 rank folders" in res.stderr, res.stderr


def doctor(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "doctor", *args], capture_output=True, text=True, timeout=240,
                          cwd=cwd)


def test_only_takes_several_ids_spaced_or_comma_separated_before_the_path(broken: Path) -> None:
    for only in (["SCP003", "SCR002"], ["SCP003,SCR002"]):
        res = doctor("--check-only", "--only", *only, str(broken))
        assert res.returncode == 1, res.stderr
        line = res.stdout.strip()
        assert line.startswith("gpu-doctor: FAIL on ") and "SCP003 fail: SCOREP_TOTAL_MEMORY=4G" in line, line
        assert "SCR002 fail: train.py never calls destroy_process_group()" in line and "SCP005" not in line, line
    res = doctor("fix", "--only", "scorep-total-memory", str(broken), "--diff")
    assert res.returncode == 0, res.stderr
    assert "# scorep-total-memory (safe): Set SCOREP_TOTAL_MEMORY to 3500M" in res.stdout
    assert "+export SCOREP_TOTAL_MEMORY=3500M" in res.stdout and "destroy" not in res.stdout


def test_explain_takes_the_remedy_ids_next_lines_print() -> None:
    res = doctor("explain", "scorep-add-cuda")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "scorep-add-cuda (remedy, safe): Add --cuda to python -m scorep so the CUDA adapter is loaded"
    assert "  `python -m scorep --cuda --thread=pthread train.py`" in lines
    assert "Proposed by: SCP002, ART002 (gpu-doctor explain SCP002)" in lines
    assert "Preview: gpu-doctor fix PATH --only scorep-add-cuda --diff" in lines
    assert doctor("explain", "no-such-thing").stderr.startswith("gpu-doctor: error: unknown check ID")


def test_one_expected_gpu_is_said_in_the_singular(fake_node: Any) -> None:
    env = fake_node("no_driver")
    res = subprocess.run([sys.executable, "-m", "doctor", "--check-only", "--expect-gpus", "1"], env=env,
                         capture_output=True, text=True, timeout=240)
    if "no NVIDIA driver" not in res.stdout:
        pytest.skip("this host has an NVIDIA driver the fake node cannot hide")
    assert ", but 1 GPU is expected (--expect-gpus 1)" in res.stdout.strip(), res.stdout


def test_fix_on_an_empty_folder_has_no_open_finding(tmp_path: Path) -> None:
    res = doctor("fix", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"gpu-doctor fix: nothing to fix in {tmp_path} (no open finding)"


def test_help_says_the_playbook_default_with_and_without_a_path() -> None:
    text = " ".join(doctor("--help").stdout.split())
    assert "(default: prologue for --check-only without PATH, scorep-ddp with a PATH and in the app)" in text
    assert "prologue (default for --check-only)" not in text


def test_a_pass_carries_no_advice(broken: Path) -> None:
    """SCP010 on the broken example passes (no run shows the instrumenter's cost yet): the line the
    user reads states that, without a 'do this' a pass must not carry."""
    res = gate(broken, "--json")
    import json

    [scp010] = [c for c in json.loads(res.stdout)["checks"] if c["id"] == "SCP010"]
    assert scp010["status"] == "pass"
    assert scp010["message"].endswith("no profile or log of a run here shows its cost yet"), scp010["message"]
    assert "cheaper" not in scp010["message"] and "filter file" not in scp010["message"]


def test_a_launch_from_the_folder_above_writes_its_record_where_post_run_on_the_job_looks(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text('import sys\nprint("ValueError: FP16 Mixed precision training with AMP or APEX '
                                  '(`--fp16`) can only be used on CUDA devices.", flush=True)\nsys.exit(1)\n')
    run = doctor("launch", "--nproc", "1", "--no-warmup", "--plain", "--", "job/train.py", cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    assert not (tmp_path / ".gpu-doctor").exists()
    assert f"log {job}/.gpu-doctor/runs/" in run.stderr, run.stderr
    res = doctor("--check-only", "--playbook", "post-run", str(job))
    assert "ART004 fail: the FP16 ValueError" in res.stdout, res.stdout + res.stderr


PROBE = """<script>
const out = {};
const next = [...document.querySelectorAll('#diagnosis tbody tr')].map(tr => tr.lastElementChild);
out.next_width = Math.min(...next.map(td => td.getBoundingClientRect().width));
out.next_lines = Math.max(...next.map(td => Math.round(td.getBoundingClientRect().height /
                                                        parseFloat(getComputedStyle(td).lineHeight))));
const cfg = document.querySelector('#scorep details');
out.config_open = cfg ? cfg.open : null;
out.config_visible = cfg ? cfg.querySelector('pre').checkVisibility() : null;
out.config_summary = cfg ? cfg.querySelector('summary').textContent : null;
const row = name => [...document.querySelectorAll('#versions tr')].find(tr => tr.cells[0] &&
  tr.cells[0].textContent === name);
out.torch = row('torch') ? [...row('torch').cells].map(c => c.textContent) : null;
out.launch = [...document.querySelectorAll('#launch tbody tr')].map(tr => [...tr.cells].map(c => c.textContent));
document.title = 'PROBE' + JSON.stringify(out);
</script>"""


@pytest.mark.scorep
@pytest.mark.slow
def test_the_report_of_a_launched_job_as_chromium_shows_it(broken: Path, tmp_path: Path) -> None:
    """The torch row uses the interpreter the last launch used (not the job script's `python` on PATH, here one
    without torch), Last launch has Host, Duration and Experiment, the Score-P config summary is collapsed,
    and the diagnosis' Next column is not one character wide."""
    import json
    import re
    import socket

    import scorep_real
    from diagnosis_util import bare_python
    from test_report_html import load_script

    shot = load_script()
    chromium = shot.find_chromium()
    if chromium is None:
        pytest.skip("no chromium on PATH")
    env = scorep_real.scorep_env(scorep_real.require())
    (broken / "tiny.py").write_text('print("step 1", flush=True)\n')
    run = scorep_real.gpu_doctor(["launch", "--instrument", "scorep", "--nproc", "1", "--no-warmup", "--",
                                  "tiny.py"], env, broken)
    assert run.returncode == 0, run.stderr
    bare = Path(bare_python(tmp_path))  # the job script's `python`, first on PATH: no torch in it
    (bare.parent / "python").exists() or (bare.parent / "python").symlink_to(bare)
    env["PATH"] = f"{bare.parent}:{env['PATH']}"
    page = tmp_path / "report.html"
    res = scorep_real.gpu_doctor(["report", str(broken), "-o", str(page)], env, broken)
    assert page.is_file(), res.stderr
    page.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    title = shot.page_title(shot.dump_dom(chromium, page)) or ""
    assert title.startswith("PROBE"), title
    seen = json.loads(title[len("PROBE"):])
    assert seen["torch"] and re.fullmatch(r"\d+\.\d+\.\d+\S*", seen["torch"][1]), seen["torch"]
    assert sys.executable.rsplit("/", 1)[0] in seen["torch"][2], seen["torch"]
    [rank0] = seen["launch"]
    assert rank0[1] == socket.gethostname() and re.fullmatch(r"\d+\.\d", rank0[4]), rank0
    assert rank0[5] == f"{broken}/scorep_rank_0", rank0
    assert seen["config_open"] is False and seen["config_visible"] is False, seen
    assert re.fullmatch(r"scorep-info config-summary \(\d+ lines\)", seen["config_summary"]), seen
    assert seen["next_width"] > 150 and seen["next_lines"] <= 6, seen


def pilot_app(root: Path, **options: Any) -> Any:
    pytest.importorskip("textual")
    from tui_pilot import CEILING_S

    from doctor.case import Case
    from doctor.tui.app import make_app
    from doctor.tui.options import Options

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCOREP_", "SLURM_"))}
    return make_app(Case(root=root, env=env), Options(playbook=options.pop("playbook", "scorep-ddp"),
                                                      budget_s=CEILING_S, extra=options))


def test_the_root_cause_line_uses_the_width_of_the_terminal(tmp_path: Path) -> None:
    from diagnosis_util import seed_chain
    from textual.widgets import Static
    from tui_pilot import plain, run_app, until

    app = pilot_app(seed_chain(tmp_path / "dnabert2"))

    async def body(pilot: Any) -> None:
        await until(pilot, lambda: app.diagnosis is not None, "the diagnosis")
        panel = app.query_one("#diagnosis", Static)
        await until(pilot, lambda: panel.size.width > 150, "the panel laid out")
        lines = [ln for ln in plain(panel, width=panel.size.width - 2).splitlines() if "root cause" in ln]
        first = app.diagnosis.root_causes[0].problem
        assert lines and len(lines[0].rstrip()) > 150, lines
        assert first.message[:120] in lines[0], lines

    run_app(app, body, size=(200, 45))


def test_the_fix_screen_counts_what_is_selected_and_its_confirmation_lists_all(broken: Path) -> None:
    from textual.widgets import SelectionList, Static
    from tui_pilot import open_screen, plain, run_app, screen_up, until

    from doctor.tui.fix import ConfirmScreen, FixScreen

    app = pilot_app(broken)

    async def body(pilot: Any) -> None:
        screen = await open_screen(pilot, app, "f", FixScreen)
        await until(pilot, lambda: screen.plan is not None, "the plan")
        sel = screen.query_one("#fix-list", SelectionList)
        offered = sel.option_count
        summary = screen.query_one("#fix-summary", Static)
        assert plain(summary).startswith(f"{len(sel.selected)} of {offered} remedies selected to apply")
        sel.deselect_all()
        await until(pilot, lambda: plain(summary).startswith(f"0 of {offered} remedies selected"), "0 selected")
        sel.select_all()
        await until(pilot, lambda: plain(summary).startswith(f"{offered} of {offered} remedies selected"), "all")
        await pilot.press("a")
        confirm = await screen_up(pilot, app, ConfirmScreen)
        question = confirm.query_one("#confirm-question", Static)
        await until(pilot, lambda: question.size.height > 0, "the question laid out")
        text = plain(question)
        assert all(f"  {rid}\n" in text for rid in sel.selected), text
        assert question.size.height >= len(sel.selected) + 2, question.size  # every line on screen, none cut
        assert f"{broken}/.gpu-doctor/" in plain(question), plain(question)
        await pilot.press("n")

    run_app(app, body, size=(140, 50))


def test_the_palettes_timeline_on_a_folder_with_no_run_says_so(tmp_path: Path) -> None:
    from textual.widgets import Static
    from tui_pilot import checks_done, palette, plain, run_app, screen_up, until

    from doctor.tui.timeline import TimelineScreen

    app = pilot_app(tmp_path)

    async def body(pilot: Any) -> None:
        await checks_done(pilot, app)
        await palette(pilot, app, "Timeline")
        screen = await screen_up(pilot, app, TimelineScreen)
        await until(pilot, lambda: screen.text is not None, "the timeline")
        shown = " ".join(plain(screen.query_one("#timeline-text", Static)).split())
        assert shown.startswith(f"No Score-P measurement in {tmp_path} yet: nothing has run here"), shown
        assert "died" not in shown and "flushed" not in shown

    run_app(app, body)


def test_an_empty_palette_shows_gpu_doctors_commands(tmp_path: Path) -> None:
    from textual.command import CommandList, CommandPalette
    from tui_pilot import checks_done, plain, run_app, screen_up, until

    app = pilot_app(tmp_path)

    async def body(pilot: Any) -> None:
        await checks_done(pilot, app)
        await pilot.press("ctrl+p")
        shown = await screen_up(pilot, app, CommandPalette)
        hits = shown.query_one(CommandList)

        def prompts() -> list[str]:
            return [plain(hits.get_option_at_index(i).prompt).strip().splitlines()[0] for i in range(hits.option_count)]

        await until(pilot, lambda: "Fix: preview and apply remedies" in prompts(), "gpu-doctor's commands")
        for name in ("Re-run checks", "Launch the per-rank run", "Timeline: where the time went",
                     "Export a report", "Undo applied remedies"):
            assert name in prompts(), prompts()
        await pilot.press("escape")

    run_app(app, body)


FAILING = """\
import sys
for i in range(80):
    print(f"step {i}", flush=True)
print("Traceback (most recent call last):", flush=True)
print('  File "train.py", line 9, in <module>', flush=True)
print("ValueError: " + "the message of the exception goes on and on " * 5 + "END-OF-MESSAGE", flush=True)
sys.exit(1)
"""


def test_the_failed_launchs_log_pane_shows_the_exceptions_last_line(tmp_path: Path) -> None:
    from textual.widgets import Input, Log
    from tui_pilot import click, open_screen, run_app, until

    from doctor.tui.launch import LaunchScreen

    (tmp_path / "train.py").write_text(FAILING)
    app = pilot_app(tmp_path, playbook="post-run", warmup=False, grace_s=0.5)

    async def body(pilot: Any) -> None:
        screen = await open_screen(pilot, app, "l", LaunchScreen)
        screen.query_one("#command", Input).value = "train.py"
        screen.query_one("#nproc", Input).value = "1"
        await click(pilot, screen.query_one("#start"))
        await until(pilot, lambda: screen.summary is not None, "the run")
        log = screen.query_one("#rank-log", Log)
        await until(pilot, lambda: any("END-OF-MESSAGE" in ln for ln in log.lines), "the last line in the pane")
        await until(pilot, lambda: log.scroll_offset.y >= log.max_scroll_y, "the pane at its end")
        width = log.scrollable_content_region.width
        assert all(len(ln) <= width for ln in log.lines), width  # nothing runs past the pane's edge
        tail = "".join(ln.removeprefix("  ") for ln in log.lines[-4:])
        assert "the message of the exception goes on and on END-OF-MESSAGE" in tail, log.lines[-4:]
        # the last line is inside the visible rows
        assert log.max_scroll_y - log.scroll_offset.y == 0 and log.lines[-1].endswith("END-OF-MESSAGE")

    run_app(app, body, size=(120, 40))


CKPT_JOB = """\
#!/bin/bash
#SBATCH --nodes=1
#SBATCH --gres=gpu:2
CKPT="$SCRATCH/ckpt/$SLURM_JOB_ID"
torchrun --standalone --nproc_per_node=2 train.py --steps 5 --checkpoint-dir "$CKPT"
"""


def test_the_launch_form_flags_an_unresolved_variable_and_edits_the_score_p_flags(tmp_path: Path) -> None:
    from textual.widgets import Input, Select, Static
    from tui_pilot import click, open_screen, plain, run_app, until

    from doctor.tui.launch import LaunchScreen

    (tmp_path / "job.sbatch").write_text(CKPT_JOB)
    (tmp_path / "train.py").write_text("import sys\nprint(sys.argv, flush=True)\n")
    app = pilot_app(tmp_path, warmup=False)
    seen: dict[str, Any] = {}

    async def body(pilot: Any) -> None:
        screen = await open_screen(pilot, app, "l", LaunchScreen)
        command = screen.query_one("#command", Input)
        assert "$CKPT" in command.value, command.value
        verdict = screen.query_one("#launch-verdict", Static)
        await until(pilot, lambda: "$CKPT" in plain(verdict), "the warning")
        assert "$CKPT: the job script sets it only when the job runs" in " ".join(plain(verdict).split())
        await click(pilot, screen.query_one("#start"))
        await until(pilot, lambda: any("$CKPT in the command is known only when the job runs" in str(n.message)
                                       for n in app._notifications), "the refusal")
        assert screen.launcher is None  # nothing started
        flags = screen.query_one("#scorep-flags", Input)
        assert flags.value == "--cuda --thread=pthread" and flags.border_title == "Score-P flags"
        flags.value = "--thread=pthread --nopython"
        screen.query_one("#instrument", Select).value = "scorep"
        command.value = command.value.replace('$CKPT', str(tmp_path / "ckpt"))
        seen["spec"] = screen.build_spec()

    run_app(app, body, size=(160, 45))
    assert seen["spec"].scorep_flags == ("--thread=pthread", "--nopython")
    assert str(tmp_path / "ckpt") in seen["spec"].args
    assert not any("$" in p.name for p in tmp_path.iterdir())  # no folder named `$CKPT`


def test_how_gpu_doctor_read_your_launch_is_in_execution_order_in_the_users_words(broken: Path) -> None:
    from textual.widgets import DataTable, Static
    from tui_pilot import checks_done, plain, run_app, screen_up

    from doctor.tui.finding import FindingScreen

    app = pilot_app(broken)

    async def body(pilot: Any) -> None:
        await checks_done(pilot, app)
        table = app.query_one("#checks", DataTable)
        table.move_cursor(row=table.get_row_index("LNC001"))
        await pilot.press("enter")
        finding = await screen_up(pilot, app, FindingScreen)
        shown = " ".join(plain(finding.query_one("#launch-read", Static), width=300).split())
        assert ("job.sbatch:27 runs python -m scorep --thread=pthread → scorep_torchrun.py (torch.distributed.run) "
                "→ train.py [4 ranks: scorep_torchrun.py (torch.distributed.run) --nproc_per_node=4]") in shown, shown
        assert "wrapper-script" not in shown and "rank(s)" not in shown

    run_app(app, body, size=(200, 50))


@pytest.mark.parametrize("run,causes", [
    (None, {"SCR001", "GPU003"}),                                    # a log without a launch record: the job's
    ({"scorep": True, "cuda": True, "node": True}, {"SCR001", "GPU003"}),
    ({"scorep": True, "cuda": False, "node": True}, {"GPU003"}),      # Score-P without --cuda
    ({"scorep": False, "cuda": False, "node": False}, set()),         # no Score-P, another host
])
def test_a_log_line_is_a_causes_symptom_only_where_its_run_had_the_precondition(run: Any, causes: set[str]) -> None:
    from doctor.diagnosis import diagnose_results
    from doctor.model import CheckResult, Finding, Status

    def result(check_id: str, layer: str, **data: Any) -> CheckResult:
        f = Finding(check_id, layer, Status.FAIL, f"{check_id} failed",
                    entities={"signature": data["signature"]} if data else {}, data=data)
        return CheckResult(check_id, layer, check_id, Status.FAIL, f.message, (f,), 0.0)

    results = [result("SCR001", "script"), result("GPU003", "node"),
               result("ART004", "artifacts", signature="fp16_valueerror", runs=[run])]
    diagnosis = diagnose_results(results)
    found = {cause.check_id for cause, _why in diagnosis.explained_by("ART004")}
    assert found == causes
    assert bool(causes) != any(u.problem.check_id == "ART004" for u in diagnosis.unexplained)


FP16_LINE = ("ValueError: FP16 Mixed precision training with AMP or APEX (`--fp16`) can only be used on CUDA "
             "devices.\n")


def no_driver(fake_node: Any, broken: Path) -> dict[str, str]:
    env = fake_node("no_driver")
    env["CUDA_VISIBLE_DEVICES"] = ""
    if "GPU001  skip    no NVIDIA driver" not in gate(broken, env=env).stderr:
        pytest.skip("this host has an NVIDIA driver the fake node cannot hide")
    return env


def test_a_log_given_with_log_whose_run_is_unknown_gets_a_chain_that_says_so(broken: Path, tmp_path: Path,
                                                                              fake_node: Any) -> None:
    """`--log FILE` of a copied rank log (no launch record beside it, no [Score-P] line in it): nothing tells
    whether its run loaded Score-P's CUDA adapter, so the verdict says SCR001 *may* explain the FP16 error and
    why, and SCR001 does not claim the logs show it happened."""
    env = no_driver(fake_node, broken)
    log = tmp_path / "copied" / "rank_0.log"
    log.parent.mkdir()
    log.write_text("step 0\n" + FP16_LINE)
    line = gate(broken, "--log", str(log), env=env).stdout.strip()
    assert ("; possible causes: LNC002, SCR001 (may explain ART004: not known whether the run that wrote rank_0.log "
            "had Score-P's CUDA adapter (--cuda): no launch record beside it, no [Score-P] line in it); first: ") \
        in line, line
    assert "SCR001 (explains" not in line and "the logs show it happened" not in line, line
    doc = json.loads(gate(broken, "--log", str(log), "--json", env=env).stdout)
    [scr001] = [r for r in doc["diagnosis"]["root_causes"] if r["id"] == "SCR001"]
    assert scr001["status"] == "warn" and "the logs show error 802 / the FP16 ValueError, but not known" \
        in scr001["message"], scr001["message"]
    assert [s["unsure"] is not None for s in scr001["explains"]] == [True], scr001


def test_a_log_whose_own_score_p_lines_show_the_cuda_adapter_keeps_the_chain(broken: Path, tmp_path: Path,
                                                                              fake_node: Any) -> None:
    """The same log with Score-P's CUDA adapter's own line in it: that run had the precondition."""
    env = no_driver(fake_node, broken)
    log = tmp_path / "copied" / "rank_0.log"
    log.parent.mkdir()
    log.write_text("[Score-P] src/adapters/cuda/scorep_cuda_init.c:88: Warning: CUDA runtime not ready\n" + FP16_LINE)
    line = gate(broken, "--log", str(log), env=env).stdout.strip()
    assert "SCR001 (explains ART004)" in line, line
    assert "may explain ART004: not known whether the run that wrote rank_0.log had Score-P's" not in line, line


def test_a_log_found_in_the_job_folder_is_judged_by_what_it_says(broken: Path, fake_node: Any) -> None:
    """A log in the job folder that is not Slurm's output of the job script, with no record: the same doubt."""
    env = no_driver(fake_node, broken)
    (broken / "logs").mkdir()
    (broken / "logs" / "train.log").write_text(FP16_LINE)
    line = gate(broken, env=env).stdout.strip()
    assert "possible causes: LNC002, SCR001 (may explain ART004: not known whether the run that wrote train.log had" \
        in line, line


def test_an_older_runs_log_given_with_log_is_judged_by_that_runs_record(broken: Path, fake_node: Any) -> None:
    """`--log` of an older launch's rank log: its own launch.json (no Score-P) rules SCR001 out, although
    the newest run was instrumented."""
    env = no_driver(fake_node, broken)
    runs = broken / ".gpu-doctor" / "runs"
    for stamp, instrument in (("20261201-091500", "none"), ("20261201-101500", "scorep")):
        (runs / stamp).mkdir(parents=True)
        (runs / stamp / "launch.json").write_text(json.dumps({"spec": {"instrument": instrument, "nproc": 1,
                                                                       "scorep_flags": ["--cuda"]}, "host": "elsewhere"}))
        (runs / stamp / "rank_0.log").write_text(FP16_LINE if instrument == "none" else "step 1\n")
    old_log = str(runs / "20261201-091500" / "rank_0.log")
    line = gate(broken, "--log", old_log, env=env).stdout.strip()
    assert "ART004" in line and "SCR001" not in line and "LNC002" not in line, line
    doc = json.loads(gate(broken, "--log", old_log, "--json", env=env).stdout)
    assert {r["id"] for r in doc["diagnosis"]["root_causes"]} & {"SCR001", "LNC002"} == set(), doc["diagnosis"]
    [scr001] = [c for c in doc["checks"] if c["id"] == "SCR001"]
    assert "the logs show" not in scr001["message"], scr001["message"]


def test_the_apps_diagnosis_panel_says_may_explain_where_the_logs_run_is_not_known() -> None:
    """The panel above the checks table: a link through a log whose run is not known to have had the cause's
    precondition reads 'may explain', with why; a known one 'explains'."""
    pytest.importorskip("textual")
    from rich.console import Console

    from doctor.diagnosis import diagnose_results
    from doctor.model import CheckResult, Finding, Status
    from doctor.tui.diagnosis_view import diagnosis_renderable

    def result(check_id: str, layer: str, status: Status = Status.FAIL, **data: Any) -> CheckResult:
        f = Finding(check_id, layer, status, f"{check_id} message",
                    entities={"signature": data["signature"]} if data else {}, data=data)
        return CheckResult(check_id, layer, check_id, status, f.message, (f,), 0.0)

    unknown = {"scorep": None, "cuda": None, "node": None, "log": "rank_0.log",
               "unknown": "no launch record beside it, no [Score-P] line in it"}
    diagnosis = diagnose_results([result("SCR001", "script", Status.WARN), result("SCR002", "script"),
                                  result("ART004", "artifacts", signature="fp16_valueerror", runs=[unknown]),
                                  result("ART003", "artifacts")])
    console = Console(width=250, record=True, color_system=None)
    console.print(diagnosis_renderable(diagnosis))
    text = console.export_text()
    assert "root cause SCR002 fail: SCR002 message\n    explains: ART003 fail" in text, text
    assert ("root cause SCR001 warn: SCR001 message\n    may explain: ART004 (fp16_valueerror) fail — not known whether "
            "the run that wrote rank_0.log had Score-P's CUDA adapter (--cuda): no launch record beside it, "
            "no [Score-P] line in it") in text, text
    assert [r.problem.check_id for r in diagnosis.root_causes] == ["SCR002", "SCR001"]


def test_the_reports_diagnosis_row_says_may_explain_with_why() -> None:
    from doctor.report.view import diagnosis_rows

    doubt = "not known whether the run that wrote rank_0.log had Score-P's CUDA adapter (--cuda)"
    doc = {"diagnosis": {"root_causes": [
        {"id": "SCR001", "signature": None, "status": "warn", "message": "scorep imported at module level",
         "next": "gpu-doctor explain SCR001",
         "explains": [{"id": "ART004", "signature": "fp16_valueerror", "status": "fail", "message": "the FP16 ValueError",
                       "unsure": doubt},
                      {"id": "ART003", "signature": None, "status": "fail", "message": "a rank left no folder",
                       "unsure": None}]}]}}
    [(cause, status, explains, _next)] = diagnosis_rows(doc)
    assert explains == (f"may explain ART004 (fp16_valueerror) fail: the FP16 ValueError ({doubt}); "
                        "ART003 fail: a rank left no folder"), explains


@pytest.mark.slow
def test_the_app_says_may_explain_for_a_log_whose_run_is_not_known(broken: Path, tmp_path: Path,
                                                                   fake_node: Any) -> None:
    """The app on the job with `--log` of a copied rank log: the diagnosis panel names SCR001 as what may
    explain the FP16 ValueError, with why, and no root cause claims it."""
    pytest.importorskip("textual")
    from textual.widgets import Static
    from tui_pilot import CEILING_S, checks_done, plain, run_app

    from doctor.case import Case
    from doctor.tui.app import make_app
    from doctor.tui.options import Options

    env = no_driver(fake_node, broken)
    log = tmp_path / "copied" / "rank_0.log"
    log.parent.mkdir()
    log.write_text(FP16_LINE)
    app = make_app(Case(root=broken, env=env, logs=(log,)), Options(playbook="scorep-ddp", budget_s=CEILING_S))

    async def body(pilot: Any) -> None:
        await checks_done(pilot, app)
        panel = " ".join(plain(app.query_one("#diagnosis", Static), width=400).split())
        assert ("root cause SCR001 warn: scorep imported at module level inside `try` in train.py" in panel), panel
        assert ("may explain: ART004 (fp16_valueerror) fail — not known whether the run that wrote rank_0.log had "
                "Score-P's CUDA adapter (--cuda): no launch record beside it, no [Score-P] line in it") in panel, panel
        assert "explains: ART004" not in panel, panel

    run_app(app, body, size=(200, 50))


def test_which_run_wrote_a_log_without_a_record(tmp_path: Path) -> None:
    """Slurm's output file is the job script's run (the job model says); any other log says what its own
    [Score-P] lines say and no more; a FIFO is not read (and does not block)."""
    from doctor.artifacts.runrecord import run_of_log

    (tmp_path / "slurm-42.out").write_text(FP16_LINE)
    assert run_of_log(tmp_path / "slurm-42.out", "vm") is None
    (tmp_path / "a.log").write_text("[Score-P] src/measurement/SCOREP_Config.c:1: Warning: x\n" + FP16_LINE)
    run = run_of_log(tmp_path / "a.log", "vm")
    assert run is not None and (run["scorep"], run["cuda"], run["node"]) == (True, None, None)
    assert run["unknown"] == "no launch record beside it, and its [Score-P] lines do not mention CUDA"
    os.mkfifo(tmp_path / "pipe.log")
    run = run_of_log(tmp_path / "pipe.log", "vm")
    assert run is not None and (run["scorep"], run["cuda"]) == (None, None)
