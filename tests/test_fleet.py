"""`gpu-doctor fleet`: the Prolog's verdicts across a generated 64-node x 30-day history (real gate
documents from the fake node, see tests/fleet_util.py), the hostlist, Slurm's drain reasons, the
screen, and what it skips."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import fleet_util
import pytest

from doctor.fleet.hostlist import compress

pytestmark = pytest.mark.slow


def fleet(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "doctor", "fleet", *args], capture_output=True, text=True,
                          timeout=120, env=env, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory, fake_libs: Path) -> fleet_util.Templates:
    return fleet_util.templates(tmp_path_factory.mktemp("templates"))


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory, templates: fleet_util.Templates) -> Path:
    folder = tmp_path_factory.mktemp("verdicts")
    assert fleet_util.history(folder, templates) == 7680
    (folder / "job-1.json.tmp").write_text("{")           # not a verdict name: never read
    (folder / "job-2.json").write_text("{half a file")    # an interrupted copy
    (folder / "node-x.json").write_text(json.dumps({"hello": "world"}))
    os.mkfifo(folder / "job-3.json")                       # would block a reader that opened it
    return folder


@pytest.fixture(scope="module")
def doc(history: Path) -> dict[str, Any]:
    done = fleet(str(history), "--json", "--no-sinfo")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_fleet_names_exactly_the_lemons_and_todays_failure(doc: dict[str, Any]) -> None:
    assert [f["node"] for f in doc["failing_now"]] == [fleet_util.TODAY]
    assert doc["failing_now"][0]["checks"] == ["GPU003"]
    assert "CUDA runtime never ready" in doc["failing_now"][0]["message"]
    assert sorted(x["node"] for x in doc["lemon"]) == sorted(fleet_util.LEMONS)
    for lemon in doc["lemon"]:
        assert lemon["score"] >= 3 and "failed 12 of 120 runs" in lemon["evidence"], lemon
    assert doc["exclude"] == "n[003,017,042,051]"
    assert doc["exclude_nodes"] == ["n003", "n017", "n042", "n051"]


def test_fleet_finds_the_alternating_check_and_nothing_else_flapping(doc: dict[str, Any]) -> None:
    assert [(f["node"], f["check"]) for f in doc["flapping"]] == [(fleet_util.FLAPPER, "GPU003")]
    assert doc["flapping"][0]["per_day"] >= 3


def test_fleet_counts_every_run_once_and_says_what_it_skipped(doc: dict[str, Any]) -> None:
    assert doc["read"]["verdicts"] == 7680 and len(doc["nodes"]) == 64
    # node-<host>.json is the Prolog's copy of a job verdict: read, recognised, not counted again.
    assert doc["read"]["duplicates"] == len(fleet_util.LEMONS) + 1 + len(fleet_util.NOISE)
    assert doc["read"]["skipped"] == {"not JSON": 1, "not a gate document": 1}
    noise = {n["node"]: n for n in doc["nodes"]}
    for name in fleet_util.NOISE:   # one bad day is a failure, not a lemon
        assert noise[name]["failed"] == 1 and not noise[name]["lemon"]
    today = noise[fleet_util.TODAY]
    assert (today["failed"], today["failed_days"], today["lemon"]) == (2, 1, False)
    assert today["failures_by_check"] == {"GPU003": 2} and today["current"]["status"] == "fail"


def test_since_keeps_only_the_last_days(history: Path) -> None:
    done = fleet(str(history), "--json", "--no-sinfo", "--since", "2")
    recent = json.loads(done.stdout)
    assert 64 * 4 < recent["read"]["verdicts"] < 64 * 4 * 3
    assert recent["read"]["skipped"]["older than --since"] > 7000
    assert [f["node"] for f in recent["failing_now"]] == [fleet_util.TODAY]


def test_the_summary_a_person_reads(history: Path) -> None:
    done = fleet(str(history), "--no-sinfo")   # no terminal: the summary, not the screen
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("gpu-doctor fleet: 7680 verdicts from 64 nodes in ")
    assert "2 files skipped (1 not JSON, 1 not a gate document)" in out.splitlines()[0]
    assert "\n  n051  GPU003: CUDA runtime never ready" in out
    assert "lemon nodes (3):\n  n003  failed 12 of 120 runs (10.0 %) on 12 days" in out
    assert "  n030  GPU003: " in out and "exclude: --exclude=n[003,017,042,051]\n" in out
    assert "drained in Slurm: not asked (--no-sinfo)" in out


def test_slurm_drain_reasons_beside_the_verdicts(history: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sinfo = bin_dir / "sinfo"
    sinfo.write_text("#!/bin/sh\n[ \"$*\" = '-R -N -h -o %N|%H|%E' ] || exit 3\n"
                     "echo 'n051|2026-12-01T10:00:00|Prolog error'\n"
                     "echo 'n060|2026-11-30T08:00:00|Kill task failed'\n"
                     "echo 'n061|2026-11-29T08:00:00|swap the PSU'\n")
    sinfo.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    drains = json.loads(fleet(str(history), "--json", env=env).stdout)["drains"]
    assert [(d["node"], d["tag"]) for d in drains] == [
        ("n051", "node problem"), ("n060", "user problem"), ("n061", "unclear")]
    assert drains[0]["why"] == "gpu-doctor's latest verdict on the node fails"
    sinfo.write_text("#!/bin/sh\necho 'sinfo: error: Unable to contact slurm controller' >&2\nexit 1\n")
    out = fleet(str(history), env=env).stdout
    assert "drained in Slurm: sinfo -R failed: sinfo: error: Unable to contact slurm controller" in out


def test_hostile_verdict_text_is_shown_escaped(tmp_path: Path, templates: fleet_util.Templates) -> None:
    folder = tmp_path / "v"
    folder.mkdir()
    doc = json.loads(json.dumps(templates.broken))
    doc["run"]["host"] = "n1\x1b]0;owned\x07"
    doc["checks"][2]["message"] = "bad \x1b[2J news"
    (folder / "job-9.json").write_text(json.dumps(doc))
    out = fleet(str(folder), "--no-sinfo").stdout
    assert "\x1b" not in out and "\x07" not in out
    assert "n1\\x1b]0;owned\\x07" in out and "bad \\x1b[2J news" in out
    asyncio.run(_hostile_screen(folder))


async def _hostile_screen(folder: Path) -> None:
    from textual.widgets import DataTable
    from tui_pilot import plain

    from doctor.fleet.analysis import analyse
    from doctor.fleet.cli import document
    from doctor.fleet.history import read_verdicts
    from doctor.tui.fleet import make_fleet_app

    reading = read_verdicts([str(folder)])
    view = analyse(reading.verdicts)
    app = make_fleet_app(document(reading, view, [], "[/bold red]", [str(folder)], None, 0.0), view)
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.pause()
        summary = plain(app.screen.query_one("#fleet-summary"))
        assert "n1\\x1b]0;owned\\x07" in summary and "[/bold red]" in summary
        cell = str(app.screen.query_one("#fleet-nodes", DataTable).get_row_at(0)[0])
        assert cell == "n1\\x1b]0;owned\\x07"


def test_hostile_files_are_skipped_by_reason(tmp_path: Path, templates: fleet_util.Templates) -> None:
    folder = tmp_path / "v"
    folder.mkdir()
    (folder / "job-1.json").write_text("[" * 200000)                          # nested past the parser's depth
    (folder / "job-2.json").write_text(json.dumps({"tool": "gpu-doctor", "checks": []}))
    bad = json.loads(json.dumps(templates.healthy))
    bad["checks"] = ["not a check"]
    (folder / "job-3.json").write_text(json.dumps(bad))
    late = json.loads(json.dumps(templates.healthy))
    late["run"]["start"] = "yesterday"
    (folder / "job-4.json").write_text(json.dumps(late))
    (folder / "job-5.json").write_bytes(b"\xff\xfe" * 10)
    (folder / "job-6.json").symlink_to("/etc/passwd")                        # never followed
    (folder / "job-7.json").write_text(json.dumps(templates.healthy))
    done = fleet(str(folder), "--json", "--no-sinfo")
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout)["read"]
    assert read["verdicts"] == 1 and read["files"] == 6
    assert read["skipped"] == {"malformed gate document": 2, "not JSON": 2, "not a gate document": 1}


def test_bad_usage_is_one_line(tmp_path: Path) -> None:
    done = fleet(str(tmp_path / "missing"))
    assert done.returncode == 2
    assert done.stderr == f"gpu-doctor fleet: error: {tmp_path / 'missing'}: not a folder (give the Prolog's VERDICT_DIR)\n"
    empty = fleet(str(tmp_path), "--no-sinfo")
    assert empty.returncode == 0 and "no gate documents found" in empty.stdout


@pytest.mark.parametrize(("names", "expected"), [
    (["n003", "n017", "n042"], "n[003,017,042]"),
    (["gpu01", "gpu02", "gpu03", "gpu09", "gpu10", "login1"], "gpu[01-03,09-10],login1"),
    (["node2"], "node2"),
    (["n1", "n2", "n10", "n2"], "n[1-2,10]"),
    ([], ""),
])
def test_hostlist_syntax(names: list[str], expected: str) -> None:
    assert compress(names) == expected


def test_the_fleet_screen_sorts_and_opens_a_node(history: Path) -> None:
    asyncio.run(_screen(history))


async def _screen(history: Path) -> None:
    from textual.widgets import DataTable

    from doctor.fleet.analysis import analyse
    from doctor.fleet.cli import document
    from doctor.fleet.history import read_verdicts
    from doctor.tui.fleet import NodeScreen, make_fleet_app

    reading = read_verdicts([str(history)])
    view = analyse(reading.verdicts)
    app = make_fleet_app(document(reading, view, [], "not asked", [str(history)], None, 0.0), view)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        table = app.screen.query_one("#fleet-nodes", DataTable)
        assert table.row_count == 64
        first = [str(table.get_row_at(i)[0]) for i in range(4)]
        assert sorted(first[:3]) == sorted(fleet_util.LEMONS)   # sorted by failed runs, most first
        assert app.screen.sub_title == "sorted by failed"
        await pilot.press("s")
        assert app.screen.sub_title == "sorted by days"
        summary = str(app.screen.query_one("#fleet-summary").render())
        assert "n051" in summary and "--exclude=n[003,017,042,051]" in summary
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, NodeScreen)
        runs = app.screen.query_one("#node-runs", DataTable)
        assert runs.row_count == 120
        assert any("GPU003 fail" in str(runs.get_row_at(i)[3]) for i in range(runs.row_count))
        await pilot.press("escape")
        assert not isinstance(app.screen, NodeScreen)
