"""The log scanner: every field-guide signature with its values, in hostile files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from doctor.artifacts import logscan
from doctor.artifacts.logscan import NAMES, discover_logs, grep_patterns, scan_file, scan_logs

DROPPED = ("[rank3]: [Score-P] scorep_cupti_activity.c:402: Warning: [CUPTI Activity] Dropped 85222 "
           "records. Current buffer size: 1048576 bytes\n"
           "To avoid dropping of records increase the buffer size!\n"
           "Proposed minimum SCOREP_CUDA_BUFFER=8889000\n")

CASES = [
    ("cupti_dropped", DROPPED, {"dropped": 85222, "current_buffer": 1048576, "proposed_buffer": 8889000,
                                "rank": 3}),
    ("memory_clamp", "[Score-P] Warning: Too many memory requested. Score-P supports only up to,\n",
     {"wording": "many", "scorep_versions": "7.0-8.1"}),
    ("memory_clamp", "[Score-P] Warning: Too much memory requested. Reducing.\n",
     {"wording": "much", "scorep_versions": "8.2+"}),
    ("unknown_option_dashdash", "[Score-P] ERROR: Unknown option: '--'\n", {}),
    ("nccl_watchdog_teardown", "  what():  Should never been called   (dummyHasPrimaryContext)\n",
     {"marker": "dummyHasPrimaryContext"}),
    ("nccl_watchdog_teardown", "frame #4: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x80\n",
     {"marker": "ncclCommWatchdog"}),
    ("fp16_valueerror", "ValueError: FP16 Mixed precision training with AMP or APEX ('--fp16') can only\n", {}),
    ("cuda_802", "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). "
                 "Error 802: system not yet initialized\n", {"code": 802}),
    ("cuda_802", "RuntimeError: cudaErrorSystemNotReady\n", {"code": 802}),
    ("experiment_collision", "[Score-P] scorep_experiment.c:51: Error: File does already exist: "
                             "scorep-20240501_1200_42\n", {"path": "scorep-20240501_1200_42"}),
    ("tpd_zero", "[Score-P] scorep_thread_create_wait_pthread.c:64: Fatal: Bug 'tpd == 0': Invalid "
                 "Pthread thread specific data object.\n", {"thread_model": "Pthread"}),
    ("lbm_conflict", "ValueError: --load_best_model_at_end requires the save and eval strategy to match, "
                     "but found\n- Evaluation strategy: IntervalStrategy.NO\n- Save strategy: "
                     "SaveStrategy.STEPS\n",
     {"eval_strategy": "IntervalStrategy.NO", "save_strategy": "SaveStrategy.STEPS"}),
    # Real Score-P 8.4 produces these in tests/test_scorep_real.py; here: the parsing of their values.
    ("scorep_oom", "[Score-P] src/measurement/SCOREP_Memory.c:187: Error: No free memory page available: Out of "
                   "memory. Please increase SCOREP_TOTAL_MEMORY=16375808 and try again.\n",
     {"total_memory": 16375808}),
    ("scorep_cuda_unsupported", "strerr: [Score-P] ERROR: Unsupported feature 'cuda' cannot be enabled by "
                                "'--cuda'\n", {}),
    ("callpath_depth", "[Score-P] src/measurement/profiling/scorep_profile_collapse.c:77: Warning: Score-P callpath "
                       "depth limitation of 100 exceeded.\nReached callpath depth was 178.\nConsider setting "
                       "SCOREP_PROFILING_MAX_CALLPATH_DEPTH to 178.\n", {"max_depth": 100, "reached_depth": 178}),
    ("scorep_no_config", "FileNotFoundError: [Errno 2] No such file or directory: 'scorep-config'\n", {}),
    ("scorep_no_compiler", "setuptools._distutils.compilers.C.errors.CompileError: [Errno 2] No such file or "
                           "directory: 'cc'\n", {"compiler": "cc"}),
]


@pytest.fixture(params=["default", "stdlib"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run each test with the RE2 finder (when installed) and with the stdlib pre-filter."""
    finder = logscan._Finder()
    if request.param == "stdlib":
        finder.re2 = None
    monkeypatch.setattr(logscan, "_FINDER", finder)
    return finder.engine


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


@pytest.mark.parametrize("signature,text,values", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_signature_is_found_with_its_values(tmp_path: Path, engine: str, signature: str,
                                                 text: str, values: dict) -> None:
    log = write(tmp_path / "train.log", "step 1 loss 0.5\n" * 3 + text + "step 2 loss 0.4\n")
    matches = scan_file(log)
    assert [m["signature"] for m in matches] == [signature]
    assert matches[0]["line"] == 4
    assert matches[0]["file"] == str(log)
    assert matches[0]["values"] == values


def test_every_signature_has_a_case() -> None:
    assert set(NAMES) == {c[0] for c in CASES}


def test_binary_junk_and_nul_bytes_do_not_hide_a_match(tmp_path: Path, engine: str) -> None:
    junk = bytes(range(256)) * 4000 + b"\x00\xff\xfe garbage \x00"
    log = write(tmp_path / "slurm-1.out", junk + b"\n" + DROPPED.encode() + junk)
    [match] = scan_file(log)
    assert match["values"]["proposed_buffer"] == 8889000
    assert match["line"] == junk.count(b"\n") + 2


def test_one_megabyte_lines_and_a_match_at_the_end_of_one(tmp_path: Path, engine: str) -> None:
    long = "x" * (1 << 20)
    text = long + "\n" + long + " [Score-P] ERROR: Unknown option: '--'\n" + long + "\n"
    [match] = scan_file(write(tmp_path / "job.err", text))
    assert match["line"] == 2
    assert match["text"].endswith("Unknown option: '--'")
    assert len(match["text"]) <= logscan.TEXT_CHARS


def test_crlf_and_carriage_return_progress_bars(tmp_path: Path, engine: str) -> None:
    bar = "".join(f"\r{i}%|####| {i}/100" for i in range(100))
    text = f"start\r\n{bar}\rError 802: system not yet initialized\r\nnext\r\n"
    [match] = scan_file(write(tmp_path / "train.log", text))
    assert match["line"] == 2
    assert match["text"] == "Error 802: system not yet initialized"


def test_a_match_across_a_block_boundary_is_found(tmp_path: Path, engine: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logscan, "BLOCK", 64)
    lines = [f"filler line {i:03d}" for i in range(40)] + ["x" * 50 + " ncclCommWatchdog() crashed"]
    [match] = scan_file(write(tmp_path / "r.log", "\n".join(lines * 2) + "\n"))[:1]
    assert match["line"] == 41
    assert len(scan_file(tmp_path / "r.log")) == 2


def test_a_file_without_newline_at_the_end(tmp_path: Path, engine: str) -> None:
    [match] = scan_file(write(tmp_path / "a.log", "ok\nFP16 Mixed precision training with AMP or APEX"))
    assert match["line"] == 2


def test_rank_comes_from_the_file_name_when_the_line_has_none(tmp_path: Path, engine: str) -> None:
    [match] = scan_file(write(tmp_path / "rank_5.log", "terminate: ncclCommWatchdog\n"))
    assert match["values"]["rank"] == 5


def test_matches_per_file_are_capped(tmp_path: Path, engine: str) -> None:
    log = write(tmp_path / "a.log", "Error 802\n" * 500)
    assert len(scan_file(log)) == logscan.MAX_PER_FILE


def test_plain_numbers_are_not_error_802(tmp_path: Path, engine: str) -> None:
    log = write(tmp_path / "a.log", "step 802 loss 0.802 tokens 18020 error_rate 0.1\ntpd == 01\n")
    assert scan_file(log) == []


def test_logs_are_discovered_and_unreadable_ones_are_named(tmp_path: Path) -> None:
    write(tmp_path / "train.log", "ok\n")
    write(tmp_path / "slurm-42.out", "Error 802\n")
    (tmp_path / "logs").mkdir()
    write(tmp_path / "logs" / "rank_1.err", "ok\n")
    write(tmp_path / "train.py", "print('Error 802')\n")
    (tmp_path / ".venv").mkdir()
    write(tmp_path / ".venv" / "x.log", "Error 802\n")
    found = discover_logs(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["logs/rank_1.err", "slurm-42.out",
                                                                   "train.log"]
    scan = scan_logs(found + [tmp_path / "missing.log"])
    assert [m["signature"] for m in scan] == ["cuda_802"]
    assert len(scan.files) == 4
    assert scan.errors and "missing.log" in scan.errors[0]


def test_a_time_budget_stops_the_scan_with_a_message(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logscan, "BLOCK", 16)
    log = write(tmp_path / "big.log", "line\n" * 100)
    with pytest.raises(TimeoutError, match="big.log: stopped after"):
        scan_file(log, deadline=0.0)


def test_the_grep_patterns_find_the_same_lines(tmp_path: Path) -> None:
    """The benchmark compares against `grep -c -E` with these patterns: they must agree."""
    text = "".join(c[1] for c in CASES) + "noise 802 line\nplain line\n"
    log = write(tmp_path / "all.log", text)
    args = ["grep", "-c", "-E"] + [x for p in grep_patterns() for x in ("-e", p)] + [str(log)]
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("grep is not installed")
    finder = logscan.finder()
    data = log.read_bytes()
    assert int(out.stdout) == len(list(finder.candidates(data, 0, len(data))))


@pytest.mark.parametrize("block", [7, 64, 4096])
def test_line_numbers_are_exact_across_blocks(tmp_path: Path, engine: str, block: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Compare against a plain line-by-line reading, with blocks much shorter than lines."""
    monkeypatch.setattr(logscan, "BLOCK", block)
    lines = []
    for i in range(400):
        if i % 37 == 5:
            lines.append(f"[rank{i % 8}] Error 802: system not yet initialized" + "y" * (i % 90))
        elif i % 53 == 11:
            lines.append("z" * (i % 200) + " ncclCommWatchdog")
        else:
            lines.append("x" * (i % 150))
    log = write(tmp_path / "train.log", "\n".join(lines))
    expected = [n for n, text in enumerate(lines, 1) if "802" in text or "Watchdog" in text]
    assert [m["line"] for m in scan_file(log)] == expected
