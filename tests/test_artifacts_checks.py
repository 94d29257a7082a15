"""ART004 over real log files, and `gpu-doctor --check-only --playbook post-run` end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import tracegen as tg  # noqa: E402

from doctor.artifacts.signatures import suggest_buffer  # noqa: E402
from doctor.case import Case  # noqa: E402
from doctor.model import Status  # noqa: E402
from doctor.runner import run_checks  # noqa: E402

DROPPED = ("[rank7]: [Score-P] Warning: [CUPTI Activity] Dropped 85222 records. Current buffer size: "
           "1048576 bytes\nTo avoid dropping of records increase the buffer size!\n"
           "Proposed minimum SCOREP_CUDA_BUFFER=8889000\n")


def art004(root: Path, logs: tuple[Path, ...] = ()) -> object:
    run = run_checks(Case(root=root, env={}, logs=logs), ["ART004"], budget_s=60)
    return run.results[0]


def test_dropped_records_give_the_buffer_size_to_set(tmp_path: Path) -> None:
    (tmp_path / "slurm-77.out").write_text("epoch 1\n" + DROPPED)
    res = art004(tmp_path)
    assert res.status == Status.FAIL
    [finding] = res.findings
    assert finding.data["proposed_buffer"] == 8889000
    assert finding.data["current_buffer"] == 1048576 and finding.data["dropped"] == 85222
    assert finding.data["SCOREP_CUDA_BUFFER"] == "64M"
    assert finding.remedies  # SCP004's remedy, or the fallback
    ev = finding.evidence[0]
    assert ev.file == str(tmp_path / "slurm-77.out") and ev.line == 2 and ev.label == "rank 7"
    assert "on rank 7" in finding.message and "8889000" in finding.message


def test_each_signature_group_is_one_finding_with_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "rank_0.err").write_text("ok\n[Score-P] Warning: Too many memory requested. Reducing\n")
    (tmp_path / "rank_1.err").write_text("x\ny\nterminate called\n  what(): (dummyHasPrimaryContext)\n"
                                         "c10d::ProcessGroupNCCL::ncclCommWatchdog()\n")
    res = art004(tmp_path)
    by_sig = {f.data["signature"]: f for f in res.findings}
    assert set(by_sig) == {"memory_clamp", "nccl_watchdog_teardown"}
    assert by_sig["memory_clamp"].status == Status.WARN
    assert by_sig["nccl_watchdog_teardown"].status == Status.FAIL
    assert by_sig["nccl_watchdog_teardown"].data["count"] == 2
    assert [(e.line, e.label) for e in by_sig["nccl_watchdog_teardown"].evidence] == [(4, "rank 1"), (5, "rank 1")]
    assert res.status == Status.FAIL


def test_clean_logs_pass_and_no_logs_skip(tmp_path: Path) -> None:
    assert art004(tmp_path).status == Status.SKIP
    (tmp_path / "train.log").write_text("step 1 loss 0.3\n")
    res = art004(tmp_path)
    assert res.status == Status.PASS and "1 log file" in res.message


def test_log_option_overrides_discovery(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text("Error 802\n")
    other = tmp_path / "elsewhere.txt"
    other.write_text("fine\n")
    assert art004(tmp_path, (other,)).status == Status.PASS


def test_an_unreadable_log_is_unknown_not_pass(tmp_path: Path) -> None:
    res = art004(tmp_path, (tmp_path / "missing.log",))
    assert res.status == Status.UNKNOWN and "missing.log" in str(res.evidence[0])


@pytest.mark.parametrize("proposed,expected", [(8889000, "64M"), (1, "8M"), (600 << 20, "4G")])
def test_suggested_buffer_has_headroom(proposed: int, expected: str) -> None:
    assert suggest_buffer(proposed) == expected


def gate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "doctor", "--check-only", *args],
                          capture_output=True, text=True, timeout=120)


def test_post_run_playbook_end_to_end_json(tmp_path: Path) -> None:
    tg.launcher_only(tmp_path)
    (tmp_path / "slurm-9.out").write_text(DROPPED)
    out = tmp_path / "verdict.json"
    proc = gate("--playbook", "post-run", "--json", "--json-file", str(out), str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert json.loads(out.read_text())["status"] == doc["status"] == "fail"
    checks = {c["id"]: c for c in doc["checks"]}
    assert set(checks) == {"ART001", "ART002", "ART003", "ART004", "ART005", "ART006"}
    assert checks["ART006"]["status"] == "skip"     # no --canary run in this folder
    assert checks["ART005"]["status"] == "pass"   # the log holds no collective timeout
    assert checks["ART001"]["status"] == "fail"
    assert checks["ART001"]["remedies"][0]["id"] == "per-rank-launch"
    assert checks["ART004"]["status"] == "fail"
    assert "Traceback" not in proc.stderr


def test_post_run_playbook_passes_on_a_clean_per_rank_run(tmp_path: Path) -> None:
    tg.per_rank_job(tmp_path, 2)
    (tmp_path / "train.log").write_text("done\n")
    proc = gate("--playbook", "post-run", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("gpu-doctor: OK")


def test_the_gate_process_itself_never_imports_otf2_or_pycubexr(tmp_path: Path) -> None:
    tg.per_rank_job(tmp_path, 1)
    code = ("import sys; from doctor.cli import main; rc = main(['--check-only', '-q', '--playbook', "
            f"'post-run', {str(tmp_path)!r}]); "
            "print([m for m in ('otf2', '_otf2', 'pycubexr', 'torch', 'textual') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout + proc.stderr


def _job_model():  # type: ignore[no-untyped-def]
    return pytest.importorskip("doctor.jobfolder.model")


def test_expected_ranks_from_world_size_on_the_instrumented_command(tmp_path: Path) -> None:
    from doctor.artifacts.jobinfo import expected_ranks, job_cuda_enable

    m = _job_model()
    site = m.Site(str(tmp_path / "job.sh"), 12, "WORLD_SIZE=4 python -m scorep --cuda train.py")
    env = {"WORLD_SIZE": m.EnvVar("WORLD_SIZE", "4", "4", m.Site(site.file, 3, "export WORLD_SIZE=4")),
           "SCOREP_CUDA_ENABLE": m.EnvVar("SCOREP_CUDA_ENABLE", "kernel", "kernel", site)}
    launch = m.Launch("python", "script", "train.py", scorep=m.ScorepWrap((), ("--cuda",)))
    cmd = m.Command(site, site.text, tuple(site.text.split()), env, launch=launch)
    job = m.Job(str(tmp_path), commands=(cmd,))
    n, ev = expected_ranks(job)
    assert n == 4 and ev.line == 3 and ev.text == "WORLD_SIZE=4"
    value, ev = job_cuda_enable(job)
    assert value == "kernel" and ev.line == 12


def test_expected_ranks_from_a_backgrounded_loop_and_from_torchrun(tmp_path: Path) -> None:
    from doctor.artifacts.jobinfo import expected_ranks

    m = _job_model()
    site = m.Site(str(tmp_path / "job.sh"), 8, "python -m scorep train.py &")
    launch = m.Launch("python", "script", "train.py", scorep=m.ScorepWrap((), ()))
    loop = m.Loop("r", 8, m.Site(site.file, 7, "for r in $(seq 0 7); do"))
    cmd = m.Command(site, site.text, tuple(site.text.split()), {}, launch=launch, loop=loop, background=True)
    assert expected_ranks(m.Job(None, commands=(cmd,)))[0] == 8
    spawner = m.Spawner("torchrun", ("torchrun",), nproc=4)
    launch = m.Launch("python", "module", "torch.distributed.run", scorep=m.ScorepWrap((), ()), spawner=spawner)
    cmd = m.Command(site, site.text, (), {}, launch=launch)
    assert expected_ranks(m.Job(None, commands=(cmd,)))[0] == 4
    assert expected_ranks(m.Job(None)) is None
    assert expected_ranks(None) is None


def test_art003_after_a_multinode_launch_counts_per_node_and_names_the_empty_node(tmp_path: Path) -> None:
    # What `gpu-doctor launch` passes after 2 nodes x 2 ranks: its WORLD_SIZE and each rank's node.
    tg.per_rank_job(tmp_path, 2, cuda=False)                      # only node1's ranks 0, 1 left folders
    launch = {"world_size": 4, "rank_nodes": {0: "gpu07", 1: "gpu07", 2: "gpu08", 3: "gpu08"}}
    run = run_checks(Case(root=tmp_path, env={}, options={"launch": launch}), ["ART003"], budget_s=60)
    [art003] = [r for r in run.results if r.check_id == "ART003"]

    assert art003.status == Status.FAIL
    [finding] = [f for f in art003.findings if f.status == Status.FAIL]
    assert finding.message == ("2 of 4 ranks left a complete measurement; missing or incomplete: rank 2, rank 3; "
                               "no experiment folder from any rank on gpu08 (ranks 2, 3)")
    per_node = [e.text for e in finding.evidence if e.label == "per node"]
    assert per_node == ["gpu07: 2 of 2 ranks measured (ranks 0, 1)", "gpu08: 0 of 2 ranks measured (ranks 2, 3)"]
    assert finding.entities["nodes"] == ["gpu08"]


def test_art003_without_the_launch_counts_only_the_folders_it_sees(tmp_path: Path) -> None:
    tg.per_rank_job(tmp_path, 2, cuda=False)
    run = run_checks(Case(root=tmp_path, env={}), ["ART003"], budget_s=60)
    assert [r.status for r in run.results if r.check_id == "ART003"] == [Status.PASS]
