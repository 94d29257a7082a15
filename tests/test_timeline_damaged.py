"""Damaged traces: a note or a refusal, never a confident number.

Each trace here is what a broken writer or a bad disk leaves: an event counter of 0 in the
definitions, sums beyond 64 bits, one timestamp outside the clock range, an anchor file the
system's OTF2 library rejects, region refs near 2^32 in a 600-byte trace, Rich markup in a
folder name. Every case runs through both readers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from timeline_tracegen import Process, comm, compute, require_c_reader, write_rank_trace, write_trace

from doctor.timeline.cli import main

MS = 1000


@pytest.fixture(autouse=True, params=["c", "python"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "c":
        require_c_reader()
    monkeypatch.setenv("GPU_DOCTOR_TIMELINE_READER", request.param)
    return str(request.param)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_an_event_counter_of_0_is_a_hint_not_a_filter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The compute stream's counter says 0 (what a low-level writer leaves): its kernels still count.
    folder = tmp_path / "scorep_rank_0"
    write_trace(folder, [Process((compute(7, 0, 900), comm(20, 400, 1000)), ((0, 1000),))], resolution=MS,
                event_counts={"CUDA[0:7]": 0})
    code, out, _ = run([str(folder), "--json"], capsys)
    rank = json.loads(out)["runs"][0]["rank_timelines"][0]
    assert code == 0 and len(rank["gpu_locations"]) == 2
    assert rank["whole_run"]["exposed_comm_s"] == pytest.approx(0.1)       # not 0.6: compute was read
    assert rank["events"] == 8


def test_sums_beyond_64_bits_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = 1 << 62
    kernels = [compute(7, 0, big), compute(8, 0, big), compute(9, 0, big)]   # Σ compute = 3 x 2^62 ticks
    folder = write_rank_trace(tmp_path / "scorep_rank_0", kernels, [(0, big)], resolution=MS)
    code, out, err = run([str(folder), "--json"], capsys)
    assert code == 2 and out == ""
    assert "the time sums overflow 64 bits" in err and "no figures are given" in err


def test_a_timestamp_outside_the_clock_range_is_a_note_naming_the_location(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kernels = [compute(7, 0, 400), comm(20, 200, 1000), compute(7, 6_000_000_000_000, 6_000_000_000_010)]
    folder = write_trace(tmp_path / "scorep_rank_0", [Process(tuple(kernels), ((0, 1000),))], resolution=MS,
                         program=(0, 1000), clock=(0, 1000))
    code, out, _ = run([str(folder), "--json"], capsys)
    rank = json.loads(out)["runs"][0]["rank_timelines"][0]
    assert code == 0
    assert rank["whole_run"]["wall_s"] == pytest.approx(1.0)            # not 190 years
    assert any("2 events on location 'CUDA[0:7]' lie outside the trace's clock range" in n for n in rank["notes"])


def test_a_file_the_system_library_rejects_is_rejected_by_both_readers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require_c_reader()           # the system's OTF2 library is reached through the C extension
    folder = write_rank_trace(tmp_path / "scorep_rank_0", [compute(7, 0, 100), comm(20, 50, 150)], [(0, 150)],
                              resolution=MS)
    anchor = folder / "traces.otf2"
    data = bytearray(anchor.read_bytes())
    data[39] = 0xFF              # the number of global definitions the anchor announces
    anchor.write_bytes(bytes(data))
    assert subprocess.run(["otf2-print", str(anchor)], capture_output=True).returncode != 0
    code, out, err = run([str(folder)], capsys)
    assert code == 2 and out == ""
    assert "the system's OTF2 library rejects it (the anchor file announces" in err


def test_region_refs_near_2_to_the_32_cost_no_memory(tmp_path: Path, reader: str) -> None:
    folder = write_trace(tmp_path / "scorep_rank_0", [Process((compute(7, 0, 100), comm(20, 50, 150)), ((0, 150),))],
                         resolution=MS, first_region_ref=(1 << 32) - 16)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert size < 1000
    script = ("import resource, sys\nfrom doctor.timeline.cli import main\ncode = main(sys.argv[1:])\n"
              "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, code, file=sys.stderr)")
    # Through a shell that forks (never execs) the reader: a process started straight from pytest
    # inherits pytest's own high-water mark as its ru_maxrss (Linux keeps it across exec).
    done = subprocess.run(["/bin/sh", "-c", '"$@"; exit $?', "sh", sys.executable, "-c", script, str(folder),
                           "--jobs", "1", "--json"],
                          capture_output=True, text=True, timeout=120,
                          env={"GPU_DOCTOR_TIMELINE_READER": reader, "PATH": "/usr/bin:/bin"})
    peak_kib, code = map(int, done.stderr.strip().splitlines()[-1].split())
    assert code == 0, done.stderr
    assert peak_kib < 100 * 1024, f"peak {peak_kib} KiB"
    rank = json.loads(done.stdout)["runs"][0]["rank_timelines"][0]
    assert rank["whole_run"]["comm_s"] == pytest.approx(0.1)


def test_rich_markup_in_folder_names_prints_literally(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_folder = tmp_path / "[/bold red]run[bold]"
    write_rank_trace(run_folder / "scorep_rank_0", [compute(7, 0, 100), comm(20, 50, 150)], [(0, 150)],
                     resolution=MS)
    code, out, err = run([str(run_folder)], capsys)
    assert code == 0, err
    assert "[/bold red]run[bold]" in out
