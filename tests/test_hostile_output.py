"""Nothing raw reaches a terminal or a report (issue 28): the same hostile strings through every output.

A training script's file name and an environment value carry an OSC title (`ESC ] 0;... BEL`),
an OSC 52 clipboard write, a screen clear (`ESC [2J`), a C1 CSI, a bidi override, Rich/Textual
markup and HTML. Every output shows them escaped (`\\x1b`), as text: the gate's reason line and
its stderr table, `fix` and `fix --diff`, the Markdown/HTML/JSON reports, the app's screens.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from doctor.sanitize import html_text, markup, shown

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "scorep-ddp-broken"
TITLE = "\x1b]0;PWNED\x07"
CLIPBOARD = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
CLEAR = "\x1b[2J"
C1 = "\x9b31m"
BIDI = "\u202e"
MARKUP = "[bold red][@click=app.quit]"
HTML = "<script>alert(1)</script>"
# A file name cannot hold `/`: the markup and the HTML in it are slash-free.
SCRIPT_NAME = f"tr{TITLE}ain{CLEAR}{MARKUP}<img src=x onerror=alert(1)>{BIDI}.py"
ENV_VALUE = f"kernel,{HTML}{CLIPBOARD}{C1}"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def hostile_job(folder: Path) -> Path:
    """The bundled broken job with the training script renamed and SCOREP_CUDA_ENABLE poisoned."""
    shutil.copytree(EXAMPLE, folder)
    (folder / "train.py").rename(folder / SCRIPT_NAME)
    sbatch = (folder / "job.sbatch").read_text()
    sbatch = sbatch.replace("    train.py \\", f"    '{SCRIPT_NAME}' \\")
    sbatch = sbatch.replace("export SCOREP_CUDA_ENABLE=kernel,memcpy,sync", f"export SCOREP_CUDA_ENABLE='{ENV_VALUE}'")
    (folder / "job.sbatch").write_text(sbatch)
    return folder


def raw_bytes(text: str) -> list[str]:
    return sorted({repr(c) for c in RAW.findall(text)})


def outside_fences(markdown: str) -> str:
    return "\n".join(re.split(r"(?ms)^(`{3,})text\n.*?^\1$", markdown)[::2])


def test_shown_escapes_every_control_character_and_keeps_the_text() -> None:
    assert shown(f"a{TITLE}b") == "a\\x1b]0;PWNED\\x07b"
    assert shown(f"{C1}{BIDI}\r") == "\\x9b31m\\u202e\\x0d"
    assert shown("tab\tand\nnewline") == "tab\tand\nnewline"
    assert shown("tab\tand\nnewline", one_line=True) == "tab\\x09and\\x0anewline"
    assert shown("crlf\r\nline\rover") == "crlf\r\nline\\x0dover"  # a CRLF line end is not an overwrite
    assert shown("plain ünïcode → ok [x] <b>") == "plain ünïcode → ok [x] <b>"
    assert html_text(HTML) == html.escape(HTML)


@pytest.mark.parametrize("text", [MARKUP, "[/bold red]", "\\[b]x[/b]", "a\\\\[i]b", "[$accent]x", "x[/]"])
def test_markup_is_text_in_rich_and_in_textual(text: str) -> None:
    from rich.console import Console
    from textual.content import Content

    console = Console(width=200, record=True, color_system=None, file=open("/dev/null", "w"))
    console.print(markup(text), end="")
    assert console.export_text() == text
    if "\\" not in text:  # Textual reads a backslash before an escaped `[` differently from Rich
        assert Content.from_markup(markup(text)).plain == text


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hostile_job(tmp_path_factory.mktemp("hostile-output") / "job")


def tool(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "doctor", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=180)


def test_gate_fix_and_diff_show_the_hostile_strings_escaped(job: Path) -> None:
    outputs = {}
    for name, argv in {"gate": ("--check-only", str(job)), "fix": ("fix", str(job), "--unsafe"),
                       "diff": ("fix", str(job), "--diff", "--unsafe")}.items():
        proc = tool(*argv, cwd=job.parent)
        assert "Traceback" not in proc.stderr and proc.returncode in (0, 1), proc.stderr[-2000:]
        outputs[f"{name} stdout"], outputs[f"{name} stderr"] = proc.stdout, proc.stderr
    assert {k: raw_bytes(v) for k, v in outputs.items()} == dict.fromkeys(outputs, [])
    assert "\\x1b]52;c;" in outputs["gate stdout"]  # the reason line names SCP002 with the value, escaped
    assert "\\x1b]0;PWNED\\x07" in outputs["gate stderr"]  # the table's SCR rows name the script
    assert "\\x1b]52;c;" in outputs["diff stdout"] and "\\x9b31m" in outputs["diff stdout"]


def test_every_report_format_escapes_control_characters_and_html(job: Path, tmp_path: Path) -> None:
    texts = {}
    for fmt in ("md", "html", "json"):
        target = tmp_path / f"report.{fmt}"
        proc = tool("report", str(job), "-o", str(target), "-q", cwd=job.parent)
        assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        texts[fmt] = target.read_text()
        assert not raw_bytes(texts[fmt]) and not raw_bytes(proc.stdout + proc.stderr), fmt
    assert "<script>" not in texts["html"] and "<img" not in texts["html"]
    assert "&lt;script&gt;" in texts["html"] and "\\x1b]0;PWNED\\x07" in texts["html"]
    cells = outside_fences(texts["md"])  # inside a fenced block, `<script>` is code, not HTML
    assert "<script>" not in cells and "<img" not in cells, cells
    assert "&lt;script&gt;" in cells and "\\x1b]" in cells
    json.loads(texts["json"])  # JSON's own escapes (\u001b) keep the data exact
    assert f"kernel,{HTML}\\u001b]52;c;" in texts["json"]


def test_the_app_shows_the_hostile_strings_as_text(job: Path) -> None:
    pytest.importorskip("textual")
    from textual.widgets import DataTable, Static
    from tui_pilot import checks_done, plain, run_app, screen_up

    from doctor.case import Case
    from doctor.tui.app import Options, make_app
    from doctor.tui.finding import FindingScreen

    app = make_app(Case(root=job), Options(playbook="scorep-ddp"))
    seen: dict[str, str] = {}

    async def body(pilot: Any) -> None:
        await checks_done(pilot, app)
        table = app.query_one("#checks", DataTable)
        seen["checks"] = "\n".join(plain(c) for row in range(table.row_count) for c in table.get_row_at(row))
        seen["title"] = f"{app.title} {app.sub_title}"
        table.move_cursor(row=table.get_row_index("SCR002"))
        await pilot.press("enter")
        screen = await screen_up(pilot, app, FindingScreen)
        seen["finding"] = "\n".join(plain(w) for w in screen.query(Static))

    run_app(app, body)
    assert {k: raw_bytes(v) for k, v in seen.items()} == dict.fromkeys(seen, []), \
        [ln for v in seen.values() for ln in v.splitlines() if RAW.search(ln)]
    assert "\\x1b]0;PWNED\\x07" in seen["checks"] and MARKUP in seen["finding"]


def test_a_launch_summary_shows_a_failing_ranks_hostile_lines_escaped(tmp_path: Path) -> None:
    from launch_util import PYTHON, write_job

    from doctor.launch.engine import Launcher
    from doctor.launch.spec import LaunchSpec
    from doctor.launch.view import summary_lines

    write_job(tmp_path, f"import sys\nprint({(TITLE + CLEAR + MARKUP + C1 + BIDI)!r}, flush=True)\nsys.exit(3)\n",
              "job.py")
    summary = Launcher(LaunchSpec("job.py", nproc=1, workdir=tmp_path, warmup=False, python=PYTHON,
                                  grace_s=0.5, kill_after_s=2.0)).run()
    text = "\n".join(summary_lines(summary))
    assert summary.exit_code == 3 and not raw_bytes(text), text
    assert "\\x1b]0;PWNED\\x07\\x1b[2J" in text and MARKUP in text
