"""The timeline at scale: the C reader against the Python one, `--jobs`, `--rank-range` +
`--merge`, a corrupt rank among good ones, progress on stderr, the fallback without the C reader."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from examples_util import EXAMPLES
from timeline_tracegen import Process, comm, compute, require_c_reader, write_rank_trace, write_trace

from doctor.timeline import analyse, creader
from doctor.timeline.cli import main
from doctor.timeline.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
MS = 1000


def ddp_rank(folder: Path, step: int, exposed: int, steps: int = 4, idle: int = 0) -> Path:
    """Per step: compute, an AllReduce half under it and `exposed` ms past it, then `idle` ms."""
    kernels, windows = [], []
    for i in range(steps):
        t = i * (step + idle)
        work = step - exposed
        kernels += [compute(7, t, t + work), compute(13, t + work // 4, t + work // 2)]
        kernels.append(comm(20, t + work // 2, t + step))
        windows.append((t, t + step + idle))
    return write_rank_trace(folder, kernels, windows, resolution=MS)


def job(tmp_path: Path) -> Path:
    """Two runs (a scaling table): 1 rank, and 5 ranks with different numbers in per-rank
    folders, beside the folder a dying rank leaves."""
    ddp_rank(tmp_path / "run_1gpu" / "scorep_rank_0", step=1000, exposed=0)
    for r in range(5):
        ddp_rank(tmp_path / "run_5gpu" / f"scorep_rank_{r}", step=1100 + 10 * r, exposed=100 + 20 * r, idle=r)
    (tmp_path / "run_5gpu" / "scorep-measurement-tmp").mkdir()
    return tmp_path


def document(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def without_reader(doc: dict[str, Any]) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    doc.pop("reader")
    for run in doc["runs"]:
        for rank in run["rank_timelines"]:
            rank.pop("reader")
    return doc


def test_c_and_python_readers_give_the_same_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require_c_reader()
    job(tmp_path)
    processes = [Process((compute(7, 0, 600), comm(20, 400, 1000)), ((0, 500), (500, 1000)), name="MPI Rank 0"),
                 Process((compute(7, 0, 1000), comm(21, 300, 700)), ((0, 1000),), device=1, name="MPI Rank 1")]
    write_trace(tmp_path / "mpi" / "traces_run", processes, resolution=MS)
    for window in ("region", "iteration"):
        c = document([str(tmp_path), "--reader", "c", "--window", window], capsys)
        python = document([str(tmp_path), "--reader", "python", "--window", window], capsys)
        assert (c["reader"], python["reader"]) == ("c", "python")
        assert without_reader(c) == without_reader(python)
        assert len([r for run in c["runs"] for r in run["rank_timelines"]]) == 8


def test_jobs_2_gives_the_same_report_as_jobs_1(tmp_path: Path) -> None:
    job(tmp_path)
    updates: list[Progress] = []
    serial = analyse([tmp_path], jobs=1)
    parallel = analyse([tmp_path], jobs=2, on_progress=updates.append)
    assert parallel.to_json() == serial.to_json()
    assert len(parallel.scaling) == 2 and len(parallel.runs[1].ranks) == 5
    finished = [u for u in updates if u.finished]
    assert sorted(u.experiment.name for u in finished if u.experiment) == sorted(
        ["scorep_rank_0"] * 2 + [f"scorep_rank_{r}" for r in range(1, 5)] + ["scorep-measurement-tmp"])
    assert max(u.done for u in finished) == 7
    # Read in worker processes: each reports its own peak memory.
    assert all(u.peak_rss_mib and u.peak_rss_mib < 1024 for u in finished)


def test_the_processes_of_one_mpi_style_trace_are_read_in_parts(tmp_path: Path) -> None:
    processes = [Process((compute(7, 0, 600 + 50 * r), comm(20, 400, 1000)), ((0, 500), (500, 1000)), device=r,
                         name=f"MPI Rank {r}") for r in range(5)]
    trace = write_trace(tmp_path / "scorep-20240101_1200_mpi", processes, resolution=MS)
    updates: list[Progress] = []
    parallel = analyse([trace], jobs=2, on_progress=updates.append)
    assert parallel.to_json() == analyse([trace], jobs=1).to_json()
    assert [r.rank for r in parallel.runs[0].ranks] == [0, 1, 2, 3, 4]
    finished = [u for u in updates if u.finished]
    assert [u.total for u in finished] == [2, 2] and sorted(u.events for u in finished) == [20, 30]


def test_rank_ranges_merged_equal_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job(tmp_path)
    processes = [Process((compute(7, 0, 600), comm(20, 400, 1000)), ((0, 1000),), name=f"MPI Rank {r}")
                 for r in range(3)]
    write_trace(tmp_path / "mpi" / "scorep-20240101_1200_mpi", processes, resolution=MS)
    whole = document([str(tmp_path)], capsys)
    parts = []
    for i, ranks in enumerate([":2", "2:4", "4:"]):
        part = document([str(tmp_path), "--rank-range", ranks], capsys)
        assert part["rank_range"] == ranks
        parts.append(tmp_path / f"part{i}.json")
        parts[-1].write_text(json.dumps(part))
    first = json.loads(parts[0].read_text())
    assert [r["rank"] for run in first["runs"] for r in run["rank_timelines"]] == [0, 1, 0, 0, 1]
    merged = document(["--merge", *map(str, parts)], capsys)
    assert merged == whole
    assert main(["--merge", *map(str, parts)]) == 0
    assert "Scaling" in capsys.readouterr().out


def test_merge_refuses_what_is_not_a_part_of_one_analysis(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    ddp_rank(tmp_path / "run" / "scorep_rank_0", step=1000, exposed=100)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(document([str(tmp_path / "run")], capsys)))
    other = tmp_path / "other.json"
    other.write_text(json.dumps(document([str(tmp_path / "run"), "--window", "iteration"], capsys)))
    (tmp_path / "junk.json").write_text("{not json")
    (tmp_path / "gate.json").write_text(json.dumps({"schema_version": 1}))
    for bad, why in [("junk.json", "not a JSON document"), ("gate.json", "not a `gpu-doctor timeline --json`"),
                     ("missing.json", "cannot read it"), ("other.json", "made with window 'iteration'")]:
        assert main(["--merge", str(good), str(tmp_path / bad)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and why in err and bad in err, err


@pytest.mark.parametrize("argv", [["--rank-range", "4:2"], ["--rank-range", "two"], ["--rank-range", "3"],
                                  ["--jobs", "0"], ["--merge", "a.json", "--json", "PATH"],
                                  ["--rank-range", "0:2", "--merge", "a.json"]])
def test_bad_options_are_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["."] + argv if "--merge" not in argv else argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-doctor timeline: error: ") and err.count("\n") == 1


def test_a_corrupt_rank_becomes_a_note_while_the_others_finish(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    for r in range(4):
        ddp_rank(tmp_path / f"scorep_rank_{r}", step=1100, exposed=100)
    for evt in (tmp_path / "scorep_rank_1" / "traces").glob("*.evt"):
        evt.write_bytes(evt.read_bytes()[:40])
    (tmp_path / "scorep_rank_2" / "traces.otf2").write_bytes(b"\x00not an OTF2 anchor\n")
    doc = document([str(tmp_path), "--jobs", "2"], capsys)
    ranks = doc["runs"][0]["rank_timelines"]
    assert [r["rank"] for r in ranks] == [0, 3]
    assert all(r["steps"]["count"] == 4 and r["whole_run"]["exposed_comm_s"] == 0.4 for r in ranks)
    notes = doc["runs"][0]["notes"]
    assert any("scorep_rank_1/traces.otf2: cannot read the events" in n for n in notes), notes
    assert any("scorep_rank_2/traces.otf2: cannot read the trace definitions" in n for n in notes), notes
    assert "Traceback" not in capsys.readouterr().err


def test_progress_lines_and_the_reader_on_a_pipe(tmp_path: Path) -> None:
    require_c_reader()
    for r in range(2):
        ddp_rank(tmp_path / f"scorep_rank_{r}", step=1100, exposed=100)
    res = subprocess.run([sys.executable, "-m", "doctor", "timeline", str(tmp_path), "--jobs", "2"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    done = sorted(ln.split("] ", 1)[1].split(":")[0] for ln in lines if " events, C reader" in ln)
    assert done == ["scorep_rank_0", "scorep_rank_1"], res.stderr
    assert any(ln.startswith("gpu-doctor timeline: [2/2] ") for ln in lines)
    assert res.stdout.startswith("Events read by the C reader")


def test_without_the_c_reader_the_python_one_runs_and_says_so_once(tmp_path: Path) -> None:
    for r in range(3):
        ddp_rank(tmp_path / f"scorep_rank_{r}", step=1100, exposed=100)
    code = ("import sys; sys.modules['doctor.timeline._sweep'] = None; "
            "from doctor.timeline.cli import main; sys.exit(main(sys.argv[1:]))")
    env = {k: v for k, v in os.environ.items() if k != "GPU_DOCTOR_TIMELINE_READER"}
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path), "--jobs", "2"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("the C reader (doctor.timeline._sweep) is not built") == 1, res.stderr
    assert "the Python reader was used" in res.stderr
    assert res.stdout.startswith("Events read by the Python reader")
    asked = subprocess.run([sys.executable, "-c", code, str(tmp_path), "--reader", "c"], capture_output=True,
                           text=True, cwd=ROOT, timeout=120, env=env)
    assert asked.returncode == 2 and "is not built" in asked.stderr and asked.stderr.count("\n") == 1


def test_the_install_goes_on_without_the_otf2_headers(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("gpu_doctor_setup", ROOT / "setup.py")
    assert spec and spec.loader
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(setup, "OTF2_HEADER", "/nonexistent/otf2.h")
    assert setup.extensions() == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "libopen-trace-format2-dev" in err and "pure-Python reader" in err
    monkeypatch.undo()
    if creader.available():
        (ext,) = setup.extensions()
        assert ext.name == "doctor.timeline._sweep"


def test_ci_builds_the_c_reader() -> None:
    """Fails in CI (CI=true) when the extension is missing; skips elsewhere with the reason."""
    require_c_reader()
    assert creader.choose("auto") == "c"


@pytest.mark.parametrize("name", ["hip-trace-mi300", "mpi-pingpong-trace", "examples/scorep-ddp-trace"])
def test_both_readers_agree_on_real_score_p_traces(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    require_c_reader()
    path = EXAMPLES.parent / name if name.startswith("examples/") else ROOT.parent / "shared" / "fixtures" / "scorep" / name
    if not path.is_dir():
        pytest.skip(f"real Score-P output {path} is absent (see ../shared/fixtures/scorep/PROVENANCE.md)")
    # The example job's ranks are named one by one (its own folder is called scorep-*).
    paths = sorted(map(str, path.glob("scorep_rank_*"))) or [str(path)]
    c = document([*paths, "--reader", "c"], capsys)
    python = document([*paths, "--reader", "python"], capsys)
    assert without_reader(c) == without_reader(python)
    assert [r["reader"] for run in c["runs"] for r in run["rank_timelines"]] == ["c"] * (1 if "hip" in name else 2)


def test_a_fifo_in_the_archive_is_a_note_not_a_hang(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ddp_rank(tmp_path / "scorep_rank_0", step=1100, exposed=100)
    bad = ddp_rank(tmp_path / "scorep_rank_1", step=1100, exposed=100)
    evt = next((bad / "traces").glob("*.evt"))
    evt.unlink()
    os.mkfifo(evt)
    doc = document([str(tmp_path), "--jobs", "1"], capsys)
    assert [r["rank"] for r in doc["runs"][0]["rank_timelines"]] == [0]
    assert any(f"{evt}: not a regular file" in n for n in doc["runs"][0]["notes"])
    fifo = tmp_path / "part.json"
    os.mkfifo(fifo)
    assert main(["--merge", str(fifo)]) == 2
    assert "not a regular file" in capsys.readouterr().err


def test_a_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    import pty

    for r in range(2):
        ddp_rank(tmp_path / f"scorep_rank_{r}", step=1100, exposed=100)
    main_end, terminal = pty.openpty()
    try:
        res = subprocess.run([sys.executable, "-m", "doctor", "timeline", str(tmp_path), "--jobs", "2"],
                             stdout=subprocess.PIPE, stderr=terminal, cwd=ROOT, timeout=120)
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = os.read(main_end, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(main_end)
    assert res.returncode == 0
    assert b"reading traces" in shown and b"2/2" in shown, shown[-500:]
    assert b"[1/2] scorep_rank" not in shown  # the plain lines are for pipes and logs
