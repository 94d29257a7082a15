"""`gpu-doctor report` shows where the time goes: the timeline section in every format, from real
OTF2 traces written into the job folder, where the right numbers are known by construction.

Rank 0 (per 1000 ms step): compute 0-600, AllReduce 400-900, idle 900-1000, so 200 ms of the
communication hide under compute and 300 ms are exposed. Rank 1: compute 0-800, AllReduce
100-600, fully hidden (the seed's lesson: a large Σ comm and no exposed time). Three steps each.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from report_util import NO_NODE, bundle_files, empty_playbook, report_validator
from timeline_tracegen import comm, compute, write_rank_trace

from doctor.report import cli, render_md
from doctor.report import timeline as report_timeline

MS = 1000  # ticks per second: times below are milliseconds
FORMATS = ("json", "md", "html", "tar.gz")
LULESH = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "scorep" / "cuda-profile-lulesh"

# (kernels per step as (kind, stream, start, end)) for each rank, and the step length.
RANK_STEPS = {
    0: [("compute", 7, 0, 600), ("comm", 20, 400, 900)],
    1: [("compute", 7, 0, 800), ("comm", 20, 100, 600)],
}
STEP = 1000
STEPS = 3

# Whole run, per rank: wall, GPU busy, compute, comm, hidden, exposed, exposed %, idle, Σ compute, Σ comm.
EXPECTED_CELLS = {
    0: ("3.000 s", "2.700 s", "1.800 s", "1.500 s", "600 ms", "900 ms", "30.0 %", "300 ms", "1.800 s", "1.500 s"),
    1: ("3.000 s", "2.400 s", "2.400 s", "1.500 s", "1.500 s", "0", "0.0 %", "600 ms", "2.400 s", "1.500 s"),
}
# The per-step mean of rank 0.
STEP_CELLS_0 = ("1.000 s", "900 ms", "600 ms", "500 ms", "200 ms", "300 ms", "30.0 %", "100 ms", "600 ms", "500 ms")
CONTRAST_0 = ("rank 0: NCCL kernels Σ 1.500 s in 3 steps; on the timeline 1.500 s, of which 600 ms hidden under "
              "compute and 900 ms exposed = 30.0 % of the wall time.")
DOUBLE_COUNT_1 = ("rank 1: Σ compute + Σ comm = 3.900 s exceeds the wall time 3.000 s: summed kernel time "
                  "double-counts the overlap.")


def write_rank(folder: Path, rank: int, step: int = STEP, steps: int = STEPS,
               per_step: list[tuple[str, int, int, int]] | None = None) -> Path:
    kernels, windows = [], []
    for i in range(steps):
        t = i * step
        for kind, stream, start, end in per_step if per_step is not None else RANK_STEPS[rank]:
            kernels.append((compute if kind == "compute" else comm)(stream, t + start, t + end))
        windows.append((t, t + step))
    return write_rank_trace(folder, kernels, windows, device=rank, resolution=MS)


def write_job(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "job.sh").write_text("#!/bin/bash\npython -m scorep --cuda train.py\n")
    for rank in RANK_STEPS:
        write_rank(root / f"scorep_rank_{rank}", rank)
    return root


def report(root: Path | None, target: Path, *extra: str) -> int:
    """`gpu-doctor report [ROOT] -o TARGET` with no checks and the node facts of a driverless host."""
    playbook = empty_playbook(target.parent)
    argv = [*([str(root)] if root else []), "-o", str(target), "--playbook", str(playbook), "-q", *extra]
    return cli.run_report(argv, preset_facts=NO_NODE)


def json_report(root: Path | None, tmp_path: Path) -> dict[str, Any]:
    """The JSON report of ROOT, validated against the schema (the renderers see the same document)."""
    assert report(root, tmp_path / "r.json") == 0
    doc: dict[str, Any] = json.loads((tmp_path / "r.json").read_text())
    report_validator().validate(doc)
    return doc


def md_row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def html_row(*cells: str) -> str:
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The traced job, under a folder named after the (planted) user, reported in every format."""
    tmp = tmp_path_factory.mktemp("timeline")
    root = write_job(tmp / "alicetest" / "job")
    out: dict[str, Any] = {"root": root, "codes": {}}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("USER", "alicetest")
        for fmt in FORMATS:
            out[fmt] = tmp / f"report.{fmt}"
            out["codes"][fmt] = report(root, out[fmt])
    return out


def test_json_report_holds_the_timeline_numbers_and_validates(reported: dict[str, Any]) -> None:
    assert reported["codes"] == {fmt: 0 for fmt in FORMATS}
    doc = json.loads(reported["json"].read_text())
    report_validator().validate(doc)
    tl = doc["timeline"]
    assert (tl["status"], tl["note"], tl["experiments"]) == ("analysed", None, 2)
    ranks = tl["result"]["runs"][0]["rank_timelines"]
    assert [r["rank"] for r in ranks] == [0, 1]
    whole = ranks[0]["whole_run"]
    assert (whole["wall_s"], whole["busy_s"], whole["compute_s"], whole["comm_s"], whole["hidden_comm_s"],
            whole["exposed_comm_s"], whole["idle_s"]) == (3.0, 2.7, 1.8, 1.5, 0.6, 0.9, 0.3)
    assert ranks[1]["whole_run"]["exposed_comm_s"] == 0.0 and ranks[1]["whole_run"]["summed"]["comm_s"] == 1.5
    assert ranks[0]["steps"]["count"] == STEPS and len(ranks[0]["steps"]["list"]) == STEPS


def test_timeline_paths_go_through_redaction(reported: dict[str, Any]) -> None:
    doc = json.loads(reported["json"].read_text())
    tl = doc["timeline"]
    assert tl["path"].endswith("/<user>/job")
    assert tl["result"]["runs"][0]["rank_timelines"][0]["experiment"].endswith("/<user>/job/scorep_rank_0")
    assert doc["redaction"]["counts"]["user_name"] >= 1
    for fmt in ("json", "md", "html"):
        assert "alicetest" not in reported[fmt].read_text(), fmt
    for name, text in bundle_files(reported["tar.gz"]).items():
        assert "alicetest" not in name + text, name


def test_markdown_shows_the_per_rank_table_and_the_summed_contrast(reported: dict[str, Any]) -> None:
    md = reported["md"].read_text()
    assert "## Where the time goes" in md
    assert md_row("Rank", "Streams", "Wall", "GPU busy", "Compute", "Comm (NCCL)", "Hidden comm", "Exposed comm",
                  "Exposed %", "Idle", "Σ compute", "Σ comm") in md
    for rank, cells in EXPECTED_CELLS.items():
        assert md_row(f"rank {rank}", "2", *cells) in md
    assert md_row("rank 0", "3", "1.000 s", *STEP_CELLS_0) in md
    assert CONTRAST_0 in md and DOUBLE_COUNT_1 in md
    # the section sits after the last launch and before the log excerpts
    assert md.index("## Last launch") < md.index("## Where the time goes") < md.index("## Log excerpts")


def test_html_shows_the_same_numbers(reported: dict[str, Any]) -> None:
    page = reported["html"].read_text()
    assert '<section id="timeline"><h2>Where the time goes</h2>' in page
    for rank, cells in EXPECTED_CELLS.items():
        assert html_row(f"rank {rank}", "2", *cells) in page
    assert f"<p>{CONTRAST_0}</p>" in page and DOUBLE_COUNT_1 in page
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org", "")


def test_bundle_carries_timeline_json_and_the_reports_with_the_section(reported: dict[str, Any]) -> None:
    files = {n.split("/", 1)[1]: t for n, t in bundle_files(reported["tar.gz"]).items()}
    timeline = json.loads(files["timeline.json"])
    assert timeline["schema"] == "gpu-doctor.timeline/1"
    ranks = timeline["runs"][0]["rank_timelines"]
    assert [r["whole_run"]["exposed_comm_s"] for r in ranks] == [0.9, 0.0]
    bundled = json.loads(files["report.json"])
    report_validator().validate(bundled)
    assert "timeline.json" in bundled["bundle"]["files"]
    assert bundled["timeline"]["result"] == timeline
    assert md_row("rank 0", "2", *EXPECTED_CELLS[0]) in files["report.md"]
    assert "  timeline.json" in files["MANIFEST.txt"]


def test_scaling_table_across_runs_in_the_job_folder(tmp_path: Path) -> None:
    root = tmp_path / "job"
    write_rank(root / "run_1gpu" / "scorep_rank_0", 0, per_step=[("compute", 7, 0, 1000)])
    for rank in range(2):  # 1100 ms steps: 1000 ms compute, AllReduce 500-1100 (100 ms exposed)
        write_rank(root / "run_2gpu" / f"scorep_rank_{rank}", rank, step=1100,
                   per_step=[("compute", 7, 0, 1000), ("comm", 20, 500, 1100)])
    doc = json_report(root, tmp_path)
    md = render_md.render(doc)
    assert "**Scaling across runs (time = median step;" in md
    assert md_row("run_1gpu", "1", "1.000 s", "1", "1.00x", "100 %", "0.0 %") in md
    assert md_row("run_2gpu", "2", "1.100 s", "1.82", "1.82x", "91 %", "9.1 %") in md


def test_profile_only_experiment_is_labelled_as_sums(tmp_path: Path) -> None:
    if not LULESH.is_dir():
        pytest.skip(f"real Score-P output {LULESH} is absent (see ../shared/fixtures/scorep/PROVENANCE.md)")
    root = tmp_path / "job"
    shutil.copytree(LULESH, root / "scorep_rank_0")
    doc = json_report(root, tmp_path)
    assert doc["timeline"]["result"]["runs"][0]["profiles"][0]["kind"] == "sums, no overlap information"
    md = render_md.render(doc)
    assert "from profiles (sums, no overlap information)" in md
    assert "**Run job: profile (sums, no overlap information)**" in md
    assert "they cannot show how much communication ran under compute" in md
    assert "Hidden comm" not in md  # no timeline table pretends to know the overlap


def test_job_folder_without_traces_says_so(tmp_path: Path) -> None:
    root = tmp_path / "job"
    (root / "scorep_rank_0").mkdir(parents=True)  # what a rank that never started measuring leaves
    (root / "scorep_rank_0" / "scorep.cfg").write_text("SCOREP_ENABLE_TRACING=true\n")
    assert report(root, tmp_path / "r.md") == 0
    md = (tmp_path / "r.md").read_text()
    assert "## Where the time goes\n\nNo Score-P traces or profiles in the job folder" in md
    assert report(root, tmp_path / "r.json") == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    report_validator().validate(doc)
    assert (doc["timeline"]["status"], doc["timeline"]["result"]) == ("no_traces", None)


def test_node_only_report_has_no_timeline_section(tmp_path: Path) -> None:
    assert report(None, tmp_path / "r.json") == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    report_validator().validate(doc)
    assert doc["timeline"] is None
    assert report(None, tmp_path / "r.html") == 0
    assert "Where the time goes" not in (tmp_path / "r.html").read_text()


def test_corrupt_trace_becomes_a_note_and_the_report_is_written(tmp_path: Path) -> None:
    root = tmp_path / "job"
    (root / "scorep_rank_0").mkdir(parents=True)
    (root / "scorep_rank_0" / "traces.otf2").write_bytes(b"this is no OTF2 anchor file\n")
    assert report(root, tmp_path / "r.md") == 0
    md = (tmp_path / "r.md").read_text()
    assert "No trace or profile could be read: " in md and "scorep_rank_0/traces.otf2: cannot read" in md
    assert "Traceback" not in md
    assert report(root, tmp_path / "r.json") == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    report_validator().validate(doc)
    assert doc["timeline"]["status"] == "unreadable"


def test_one_corrupt_rank_among_good_ones_is_a_note_beside_the_numbers(tmp_path: Path) -> None:
    root = tmp_path / "job"
    write_rank(root / "scorep_rank_0", 0)
    bad = write_rank(root / "scorep_rank_1", 1)
    for evt in (bad / "traces").glob("*.evt"):
        evt.write_bytes(evt.read_bytes()[:7])
    assert report(root, tmp_path / "r.html") == 0
    page = (tmp_path / "r.html").read_text()
    assert html_row("rank 0", "2", *EXPECTED_CELLS[0]) in page
    assert "scorep_rank_1" in page and "cannot read the events" in page


def test_spent_budget_skips_the_analysis_with_a_note(tmp_path: Path) -> None:
    root = write_job(tmp_path / "job")
    assert report(root, tmp_path / "r.md", "--timeout", "0.001") == 0
    md = (tmp_path / "r.md").read_text()
    assert "Skipped: 0.0 s left of the run's time budget (--timeout) for 2 experiment folders" in md
    assert f"run `gpu-doctor timeline {root}` for the numbers" in md


def test_analysis_past_the_budget_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_job(tmp_path / "job")
    # A stand-in for an analysis that would outlast the budget: select() on nothing blocks for ever.
    monkeypatch.setattr(report_timeline, "child_argv",
                        lambda root: [sys.executable, "-c", "import select, sys; select.select([], [], [])"])
    tl = report_timeline.section(root, budget_s=report_timeline.MIN_BUDGET_S)
    assert tl is not None and tl["status"] == "timeout" and tl["result"] is None
    assert tl["note"].startswith("Stopped after 1.0 s, the run's remaining time budget")


@pytest.mark.parametrize(("code", "status", "says"), [
    ("import os; os.abort()", "failed", "The timeline analysis failed: SIGABRT"),
    ("raise RuntimeError('reader bug')", "failed", "The timeline analysis failed: RuntimeError: reader bug"),
    ("print('not json')", "failed", "The timeline analysis printed no timeline document: not json"),
])
def test_a_broken_analysis_becomes_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          code: str, status: str, says: str) -> None:
    root = write_job(tmp_path / "job")
    monkeypatch.setattr(report_timeline, "child_argv", lambda root: [sys.executable, "-c", code])
    tl = report_timeline.section(root, budget_s=30)
    assert tl is not None and (tl["status"], tl["note"]) == (status, says)
    paragraphs = report_timeline.blocks(tl)
    assert paragraphs == [report_timeline.Para(says)]


def test_report_names_the_straggler_and_shows_htas_metrics(tmp_path: Path) -> None:
    from timeline_tracegen import write_planted_otf2

    root = tmp_path / "job"
    write_planted_otf2(root)
    doc = json_report(root, tmp_path)
    stragglers = doc["timeline"]["result"]["runs"][0]["stragglers"]
    assert stragglers["culprit"] == 5 and stragglers["stability"] == pytest.approx(0.70)
    md = render_md.render(doc)
    assert ("Stragglers over 20 steps: rank 5 entered the step's last collective last in 70 % of the steps "
            "(culprit stability 0.70)") in md
    assert "| Rank | idle_time | compute_time | non_compute_time | host_wait | kernel_wait | other | " \
           "comp_comm_overlap_pctg |" in md
    assert md_row("rank 5", "33.07", "60.82", "6.11", "n/a", "1.23", "98.77", "72.64") in md
    assert "| Rank | Basis | Computation | Overlapping | Communication | Other |" in md
