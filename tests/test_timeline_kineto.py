"""torch.profiler (Kineto) JSON traces: streamed, ranks from distributedInfo, damage as one line.

Hand-written traces in Kineto's spelling (cat kernel / cuda_runtime / user_annotation, µs
timestamps, args.correlation); the planted 8-rank run against HTA is in test_timeline_hta.py.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path

import pytest

from doctor.timeline import kineto
from doctor.timeline.cli import main

REPO = Path(__file__).resolve().parents[1]


def kineto_trace(rank: int | None) -> dict[str, object]:
    events: list[dict[str, object]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 10, "tid": 10, "ts": 1000, "dur": 1000},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 10, "tid": 10, "ts": 2000, "dur": 1000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 10, "ts": 1010, "dur": 300},
        {"ph": "X", "cat": "cpu_op", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
         "pid": 10, "tid": 10, "ts": 2010, "dur": 100},
        {"ph": "i", "s": "t", "name": "Iteration Start: PyTorch Profiler", "pid": 10, "tid": 10, "ts": 1000},
    ]
    for step in (1000, 2000):
        for n, (stream, start, end, name) in enumerate(((7, 100, 700, "ampere_sgemm_128x64_tn"),
                                                        (20, 500, 900, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"))):
            corr = step + n
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11,
                           "ts": step + start - 50, "dur": 5, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": step + start,
                           "dur": end - start, "args": {"device": 0, "stream": stream, "correlation": corr}})
    doc: dict[str, object] = {"schemaVersion": 1, "traceEvents": events, "displayTimeUnit": "ms"}
    if rank is not None:
        doc = {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}, **doc}
    return doc


def test_streamed_in_small_chunks_equals_json_load(monkeypatch: pytest.MonkeyPatch) -> None:
    text = json.dumps(kineto_trace(3), indent=1)
    monkeypatch.setattr(kineto, "CHUNK", 7)          # every value crosses chunk boundaries
    meta: dict[str, object] = {}
    events = list(kineto.iter_trace(io.StringIO(text), meta))
    whole = json.loads(text)
    assert events == whole["traceEvents"]
    assert meta["distributedInfo"] == {"backend": "nccl", "rank": 3, "world_size": 2}


def test_a_folder_of_traces_is_a_run_ranked_by_distributed_info(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "tb_logs"
    run.mkdir()
    (run / "host_200.1700000000001.pt.trace.json").write_text(json.dumps(kineto_trace(1)))
    with gzip.open(run / "host_100.1700000000002.pt.trace.json.gz", "wt") as f:
        f.write(json.dumps(kineto_trace(0)))
    assert main([str(run), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ranks = doc["runs"][0]["rank_timelines"]
    assert [r["rank"] for r in ranks] == [0, 1] and doc["reader"] == "kineto"
    r = ranks[0]
    assert r["format"] == "kineto" and r["steps"]["count"] == 2
    assert r["whole_run"]["hidden_comm_s"] == pytest.approx(400e-6)       # ncclDevKernel_* is NCCL
    assert r["hta"]["comp_comm_overlap_pctg"] == pytest.approx(50.0)
    assert r["regions"]["categories"]["data_loading"] == pytest.approx(100e-6)
    assert main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "Events read by the torch.profiler (Kineto JSON) reader." in out and "comp_comm_overlap_pctg" in out


def test_a_truncated_trace_is_one_line_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "host_1.1.pt.trace.json"
    path.write_text(json.dumps(kineto_trace(0))[:-200])
    assert main([str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert f"error: {path}: not a readable Kineto trace (" in err and "Traceback" not in err


def test_a_trace_without_a_rank_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "host_1.1.pt.trace.json").write_text(json.dumps(kineto_trace(None)))
    assert main([str(tmp_path), "--json"]) == 0
    rank = json.loads(capsys.readouterr().out)["runs"][0]["rank_timelines"][0]
    assert rank["rank"] is None and "no distributedInfo.rank in the trace: the rank is unknown" in rank["notes"]


def test_a_profile_only_run_gets_the_hint_to_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    for rank in (0, 1):
        source = REPO / "examples" / "scorep-ddp-trace" / f"scorep_rank_{rank}"
        (run / source.name).mkdir(parents=True)
        shutil.copy(source / "profile.cubex", run / source.name / "profile.cubex")
    assert main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "hint: only a profile (sums, no timeline): set SCOREP_ENABLE_TRACING=true for a trace" in out
    assert "hint: no GPU kernels: measure CUDA with `python -m scorep --cuda`" in out
    # what the sums can say: where the CPU time went, per experiment
    assert "CPU time per experiment (profile: exclusive time of the regions on the CPU locations)" in out
    assert "__main__:main 8." in out
