"""What a newcomer meets in the first hour on the command line (issue 17): `--help` everywhere,
a file as PATH, `--only` counts, the README's commands, the report's interpreters, the remedies'
text. Each test runs the real CLI (a subprocess) on a copy of a bundled example or a small job.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from examples_util import EXAMPLES

from doctor.cli import COMMANDS

REPO = Path(__file__).resolve().parents[1]
BROKEN = EXAMPLES / "scorep-ddp-broken"
README = REPO / "README.md"


def gpu_doctor(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "doctor", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=env)


@pytest.fixture
def job(tmp_path: Path) -> Path:
    dst = tmp_path / "job"
    shutil.copytree(BROKEN, dst)
    return dst


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_answers_help(command: str) -> None:
    proc = gpu_doctor(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: gpu-doctor {command}"), proc.stdout
    assert proc.stderr == ""


@pytest.mark.parametrize("argv", [
    ("--check-only", "{file}"),
    ("fix", "{file}"),
    ("undo", "{file}"),
    ("report", "{file}", "-o", "{tmp}/report.json"),
])
def test_a_file_as_path_means_its_folder_said_once(job: Path, tmp_path: Path, argv: tuple[str, ...]) -> None:
    file = job / "train.py"
    proc = gpu_doctor(*(a.format(file=file, tmp=tmp_path) for a in argv))
    assert proc.returncode in (0, 1), proc.stderr  # a verdict or a listing, not a usage error
    said = [ln for ln in proc.stderr.splitlines() if "is a file" in ln]
    assert said == [f"gpu-doctor: {file} is a file: examining its folder, {job}"]
    assert f"{file} " not in proc.stdout + proc.stderr.replace(said[0], "")  # never "under …/train.py"
    assert f"{file}\n" not in proc.stdout + proc.stderr.replace(said[0], "")


def test_undo_of_a_file_puts_back_its_folder(job: Path) -> None:
    assert gpu_doctor("fix", str(job), "--apply", "-q").returncode == 0
    proc = gpu_doctor("undo", str(job / "job.sbatch"))
    assert proc.returncode == 0, proc.stderr
    assert "restored job.sbatch" in proc.stdout
    assert (job / "job.sbatch").read_bytes() == (BROKEN / "job.sbatch").read_bytes()


@pytest.mark.parametrize("only", [("GPU003",), ("GPU003", "GPU002"), ("GPU001",)])
def test_only_counts_what_it_lists_and_the_verdict_counts(only: tuple[str, ...]) -> None:
    proc = gpu_doctor("--check-only", *(w for c in only for w in ("--only", c)))
    head, *rows = proc.stderr.splitlines()
    rows = [r for r in rows if re.match(r"  [A-Z]{3}\d{3} ", r)]
    n = int(re.search(r": (\d+) checks? ", head + " ").group(1))  # type: ignore[union-attr]
    verdict = sum(int(x) for x in re.findall(r"(\d+) (?:pass|warn|fail|skip|unknown|timeout)", proc.stdout))
    assert n == len(rows) == verdict, (head, rows, proc.stdout)
    assert f"{n} check{'s' if n > 1 else ''} " in head
    ran = [r.split()[0] for r in rows]
    deps = [c for c in ran if c not in only]
    if deps:  # the checks it depends on are named, not counted silently
        assert all(d in head for d in deps) and "depend" in head


def test_nothing_in_an_empty_folder_passes(tmp_path: Path) -> None:
    """TRN002 used to pass ("no fp16/bf16 asked for") in a folder with no job at all."""
    proc = gpu_doctor("--check-only", "--playbook", "scorep-ddp", "--json", str(tmp_path))
    doc = json.loads(proc.stdout)
    job_layers = {"scorep", "launcher", "script", "trainer", "artifacts"}
    passed = [c["id"] for c in doc["checks"] if c["layer"] in job_layers and c["status"] == "pass"]
    assert passed == []
    assert next(c for c in doc["checks"] if c["id"] == "TRN002")["status"] == "skip"


# -- the README says what the commands do -------------------------------------------------------

def readme_command(sentence_end: str) -> list[str]:
    """The backticked command of the README sentence that ends with `sentence_end`."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    m = re.search(r"`([^`]+)`\s+" + re.escape(sentence_end), text)
    assert m, f"README: no command before {sentence_end!r}"
    words = m.group(1).split()
    assert words[0].endswith("gpu-doctor")
    return words[1:]


def test_the_readme_diff_command_shows_every_fix() -> None:
    argv = readme_command("shows every fix as a diff")
    diff = gpu_doctor(*argv, cwd=REPO)
    assert diff.returncode == 0, diff.stderr
    assert "+++ b/run_ranks.sh" in diff.stdout  # the unsafe per-rank launch script
    assert "+++ b/train.py" in diff.stdout and "+++ b/metrics.py" in diff.stdout  # the code edits
    assert "needs --unsafe" not in diff.stderr
    # The torchrun wrapper the new launch no longer runs is named where the launch was, and kept.
    assert "+# gpu-doctor per-rank-launch: run_ranks.sh starts the ranks; scorep_torchrun.py is no longer used" \
        in diff.stdout
    assert "scorep_torchrun.py\n+++ /dev/null" not in diff.stdout


def test_the_fix_listing_says_the_torchrun_wrapper_is_left_unused() -> None:
    listing = gpu_doctor("fix", str(BROKEN), "--unsafe").stdout
    line = next(ln for ln in listing.splitlines() if "bash ./run_ranks.sh" in ln)
    assert line.endswith("scorep_torchrun.py is left unused"), line


def test_the_readme_names_the_playbook_the_gate_runs_with_a_path() -> None:
    proc = gpu_doctor("--check-only", str(BROKEN))
    playbook = re.match(r"gpu-doctor (\S+):", proc.stderr).group(1)  # type: ignore[union-attr]
    without = re.match(r"gpu-doctor (\S+):", gpu_doctor("--check-only").stderr).group(1)  # type: ignore[union-attr]
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert f"The default playbook is `{without}` without PATH and `{playbook}` with one" in text


# -- the report says which interpreter each fact came from ---------------------------------------

def interpreter_job(tmp_path: Path) -> tuple[Path, Path]:
    """A job whose script runs `python` from a folder it puts first on PATH."""
    bin_dir = tmp_path / "env" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.symlink_to(shutil.which("python3") or sys.executable)
    root = tmp_path / "job"
    root.mkdir()
    (root / "job.sh").write_text(f"#!/bin/bash\nexport PATH={bin_dir}:$PATH\nsrun python -m scorep --cuda train.py\n")
    (root / "train.py").write_text("import torch\nprint(torch.__version__)\n")
    return root, python


def test_the_report_names_the_interpreter_of_each_fact(tmp_path: Path) -> None:
    root, python = interpreter_job(tmp_path)
    docs = {}
    for ext in ("json", "md", "html"):
        proc = gpu_doctor("report", str(root), "-o", str(tmp_path / f"r.{ext}"), "-q")
        assert proc.returncode in (0, 1), proc.stderr
        docs[ext] = (tmp_path / f"r.{ext}").read_text(encoding="utf-8")
    doc = json.loads(docs["json"])
    assert doc["system"]["job_python"] == str(python)
    assert "the job script's `python`" in doc["system"]["job_python_from"]
    rows = {v["name"]: v for v in doc["versions"]}
    for name in ("torch", "NCCL", "Score-P Python bindings"):
        assert rows[name]["python"] == str(python), rows[name]
    assert rows["NVIDIA driver"]["python"] is None
    assert f"| Python (job) | {python} (the job script's `python`, looked up on the job's PATH) |" in docs["md"]
    assert re.search(rf"\| torch \| [^|]+ \| framework \(in {re.escape(str(python))}\) \|", docs["md"])
    assert f"framework (in {python})" in docs["html"]
    assert f"<td>{python} (the job script&#x27;s <code>python</code>, looked up on the job&#x27;s PATH)</td>" \
        in docs["html"]


def test_the_html_report_keeps_ids_whole_and_shows_code_as_code(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    gpu_doctor("report", str(BROKEN), "-o", str(page), "-q")
    text = page.read_text(encoding="utf-8")
    assert "overflow-wrap:anywhere; }" not in text.split("td.key")[0]  # cells break between words only
    assert "td.key { white-space:nowrap; }" in text
    assert '<td class="key"><a href="#check-SCP002">SCP002</a></td><td class="key">scorep</td>' in text
    outside_pre = re.sub(r"<pre>.*?</pre>", "", text, flags=re.S)
    assert "`" not in outside_pre
    assert "has no --cuda" in text and "<code>python -m scorep</code> has no --cuda" in text


# -- the remedies' text -----------------------------------------------------------------------

def test_the_warm_up_goes_above_the_comment_of_its_launch(job: Path) -> None:
    assert gpu_doctor("fix", str(job), "--apply", "--only", "cuda-warmup", "-q").returncode == 0
    lines = (job / "job.sbatch").read_text().splitlines()
    comment = next(i for i, ln in enumerate(lines) if ln.startswith("# torchrun as a script"))
    assert lines[comment + 1].startswith("python -m scorep")  # the comment still sits on its command
    assert lines[comment - 1] == "fi"  # the warm-up loop ends right above it
    assert any("gpu-doctor: cuda-warmup" in ln for ln in lines[:comment])


@pytest.mark.parametrize("steps", [
    [("--apply",), ("--apply", "--unsafe")],
    [("--apply", "--unsafe", "--only", "per-rank-launch"), ("--apply",)],
])
def test_one_warm_up_after_safe_and_unsafe_fixes(job: Path, steps: list[tuple[str, ...]]) -> None:
    for step in steps:
        proc = gpu_doctor("fix", str(job), *step, "-q")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    sbatch = (job / "job.sbatch").read_text()
    ranks = (job / "run_ranks.sh").read_text()
    warmups = sbatch.count("gpu-doctor: cuda-warmup") + ranks.count("gpu-doctor: cuda-warmup")
    skipped = "bash ./run_ranks.sh" in sbatch and "--no-warmup" in sbatch.split("bash ./run_ranks.sh")[1]
    assert warmups - skipped == 1, sbatch
