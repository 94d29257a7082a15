"""The diagnosis: root causes first, each with its symptoms, in the JSON, the reason line and the report;
and every reason line with a finding ends with a command that works when pasted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from diagnosis_util import gate, gate_env, next_command, paste, seed_chain
from jobfolder_util import EXAMPLES

from doctor import registry
from doctor.artifacts.signatures import SIGNATURE_CHECKS
from doctor.diagnosis import LINKS, diagnose_results
from doctor.model import CheckResult, Finding, Status


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seed_chain(tmp_path_factory.mktemp("chain") / "dnabert2")


def roots_of(doc: dict) -> dict[str, set[str]]:  # type: ignore[type-arg]
    return {r["id"]: {s["id"] + (f":{s['signature']}" if s["signature"] else "") for s in r["explains"]}
            for r in doc["diagnosis"]["root_causes"]}


def test_the_seed_chain_gives_two_root_causes_with_their_symptoms_in_json(chain: Path, tmp_path: Path) -> None:
    run = gate(chain, tmp_path, "--json")  # run_gate validates the document against the schema
    assert run.rc == 1 and run.doc is not None
    assert roots_of(run.doc) == {"SCR001": {"ART004:fp16_valueerror"},
                                 "SCR002": {"ART003", "ART004:nccl_watchdog_teardown"}}
    by_id = {r["id"]: r for r in run.doc["diagnosis"]["root_causes"]}
    assert "the logs show it happened" in by_id["SCR001"]["message"]
    assert by_id["SCR002"]["next"] == f"gpu-doctor fix {chain} --only destroy-process-group --unsafe --diff"
    # the launcher-only launch is a problem of its own: nothing here is its symptom
    assert [p["id"] for p in run.doc["diagnosis"]["independent"]] == ["LNC001"]
    assert run.doc["schema_version"] == "1.1"


def test_the_reason_line_names_root_causes_first_and_ends_with_a_working_command(chain: Path,
                                                                                tmp_path: Path) -> None:
    run = gate(chain, tmp_path)
    [line] = run.stdout.splitlines()
    assert "root causes: SCR002 (explains ART003, ART004), SCR001 (explains ART004)" in line
    assert line.index("(SCR002, SCR001") < line.index("ART003")
    command = next_command(line)
    assert command == f"gpu-doctor fix {chain} --only destroy-process-group --unsafe --diff"
    pasted = paste(command, tmp_path, gate_env())
    assert pasted.returncode == 0, pasted.stderr
    assert "+    torch.distributed.destroy_process_group()" in pasted.stdout or \
        "destroy_process_group()" in pasted.stdout, pasted.stdout


@pytest.mark.parametrize("folder,playbook", [
    (EXAMPLES / "scorep-ddp-broken", "scorep-ddp"),
    (EXAMPLES / "scorep-ddp-fixed", "scorep-ddp"),
    (None, "prologue"),
])
def test_every_reason_line_with_a_finding_ends_with_a_command_that_works(folder: Path | None, playbook: str,
                                                                         tmp_path: Path) -> None:
    args = ["--playbook", playbook] + ([str(folder)] if folder else [])
    proc = subprocess.run([sys.executable, "-m", "doctor", "--check-only", "--quiet", *args], env=gate_env(),
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    [line] = proc.stdout.splitlines()
    findings = proc.returncode == 1 or "warnings:" in line or "unknown" in line or "timeout" in line
    if not findings:
        assert "; next: " not in line
        return
    pasted = paste(next_command(line), tmp_path, gate_env())
    assert pasted.returncode == 0, (line, pasted.stderr)
    assert pasted.stdout.strip(), line


def test_the_report_shows_the_diagnosis_in_every_format(chain: Path, tmp_path: Path) -> None:
    out = {}
    for ext in ("json", "md", "html"):
        target = tmp_path / f"report.{ext}"
        proc = subprocess.run([sys.executable, "-m", "doctor", "report", str(chain), "-o", str(target)],
                              env=gate_env(), capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode in (0, 1), proc.stderr
        out[ext] = target.read_text()
    assert roots_of(json.loads(out["json"]))["SCR001"] == {"ART004:fp16_valueerror"}
    md = out["md"].split("## Diagnosis", 1)[1].split("\n## ", 1)[0]
    assert md.index("SCR002: train.py never calls") < md.index("SCR001: scorep imported")
    assert "ART004 (fp16_valueerror) fail: the FP16 ValueError" in md and "ART003 fail: 3 of 4 ranks" in md
    assert "Next: `gpu-doctor fix" in md
    html = out["html"].split('id="diagnosis"', 1)[1].split("</section>", 1)[0]
    assert "SCR001: scorep imported" in html and "ART004 (nccl_watchdog_teardown)" in html


# -- the table itself ------------------------------------------------------------------------

def _ids(key: str) -> str:
    return key.partition(":")[0]


def test_every_link_names_registered_checks_and_known_signatures() -> None:
    registry.load()
    for link in LINKS:
        for key in (link.symptom, *link.causes):
            assert _ids(key) in registry.CHECKS, key
            if ":" in key:
                assert key.partition(":")[2] in SIGNATURE_CHECKS, key


def test_each_log_signature_links_to_its_matching_check() -> None:
    for sig, (check_id, _rem) in SIGNATURE_CHECKS.items():
        link = next((lk for lk in LINKS if lk.symptom == f"ART004:{sig}"), None)
        assert link is not None, sig
        assert check_id in link.causes or any(_ids(c) == "ART004" for c in link.causes), sig


def test_the_links_have_no_cycle() -> None:
    edges = {lk.symptom: set(lk.causes) for lk in LINKS}

    def reach(key: str, seen: tuple[str, ...]) -> None:
        assert key not in seen, " <- ".join(seen + (key,))
        for cause in edges.get(key, ()):
            reach(cause, seen + (key,))

    for key in edges:
        reach(key, ())


def _result(check_id: str, layer: str, status: Status, signature: str | None = None) -> CheckResult:
    f = Finding(check_id, layer, status, f"{check_id} {status.value}",
                entities={"signature": signature} if signature else {})
    return CheckResult.from_findings(check_id, layer, check_id, (f,), 1.0)


def test_a_symptom_without_its_cause_is_unexplained_and_a_chain_collapses_to_its_root() -> None:
    results = [_result("LNC002", "launcher", Status.FAIL),
               _result("ART001", "artifacts", Status.FAIL),
               _result("ART004", "artifacts", Status.FAIL, "cuda_802")]
    results[2] = CheckResult.from_findings("ART004", "artifacts", "ART004", results[2].findings + (
        Finding("ART004", "artifacts", Status.FAIL, "fp16", entities={"signature": "fp16_valueerror"}),), 1.0)
    d = diagnose_results(results)
    [root] = d.root_causes
    assert root.problem.key == "LNC002"
    assert {s.problem.key for s in root.symptoms} == {"ART004:cuda_802", "ART004:fp16_valueerror"}
    [lost] = d.unexplained
    assert lost.problem.key == "ART001" and lost.possible_causes == ("LNC001",)
    assert d.next_step == "gpu-doctor explain LNC002"  # no job folder: nothing for `fix` to edit


# -- the launch's own logs are the job's logs ------------------------------------------------

def test_the_last_launchs_rank_logs_count_for_art004_and_post_run(tmp_path: Path) -> None:
    runs = tmp_path / "job" / ".gpu-doctor" / "runs"
    old, last = runs / "20261201-091500", runs / "20261201-101500"
    for folder in (old, last):
        folder.mkdir(parents=True)
        (folder / "rank_0.log").write_text("step 1/5 loss 0.69\nstep 5/5 loss 0.41\n")
    (old / "rank_1.log").write_text("[Score-P] Warning: Too much memory requested. Reducing to its maximum value.\n")
    (last / "rank_1.log").write_text(
        "Traceback (most recent call last):\n  File \"train.py\", line 40, in <module>\n"
        "ValueError: FP16 Mixed precision training with AMP or APEX ('--fp16') can only be used on CUDA devices.\n")
    run = gate(tmp_path / "job", tmp_path, "--json", "--playbook", "post-run")
    art004 = run.check("ART004")
    [finding] = [f for f in art004["findings"] if f["status"] == "fail"]
    assert finding["data"]["signature"] == "fp16_valueerror"
    [ev] = finding["evidence"]
    assert ev["file"].endswith(".gpu-doctor/runs/20261201-101500/rank_1.log") and ev["line"] == 3
    assert ev["label"] == "rank 1"
    assert not any(f["data"].get("signature") == "memory_clamp" for f in art004["findings"])  # an old run


def test_a_failed_ranks_log_names_the_check(tmp_path: Path) -> None:
    from doctor.launch.failures import rank_failures

    (tmp_path / "rank_0.log").write_text("step 3/3\n")
    (tmp_path / "rank_1.log").write_text(
        "ValueError: --load_best_model_at_end requires the save and eval strategy to match, but found\n"
        "- Evaluation strategy: IntervalStrategy.NO\n- Save strategy: SaveStrategy.STEPS\n")
    [failure] = rank_failures(tmp_path, [1])
    assert failure.text("press f").startswith("rank 1: TRN001 — press f (load_best_model_at_end needs matching")
    assert "eval IntervalStrategy.NO" in failure.what and "on rank" not in failure.what


def test_the_headless_launch_summary_names_the_check_of_a_failed_rank(tmp_path: Path) -> None:
    from doctor.launch.events import RankResult, RankState, RunSummary
    from doctor.launch.view import summary_lines

    (tmp_path / "rank_1.log").write_text("ValueError: FP16 Mixed precision training with AMP or APEX ('--fp16') "
                                         "can only be used on CUDA devices.\n")
    ranks = tuple(RankResult(r, RankState.FAILED if r else RankState.KILLED, 1 if r else -15, 100 + r,
                             str(tmp_path / f"rank_{r}.log"), ()) for r in (0, 1))
    lines = summary_lines(RunSummary(1, "rank 1 failed first (exit code 1)", ranks, 1, str(tmp_path), 2.0, 2, "a:1"))
    assert lines[-1].startswith("  rank 1: TRN002 (the FP16 ValueError: PyTorch saw no CUDA device")
    assert lines[-1].endswith(": gpu-doctor explain TRN002")


def test_explain_shows_a_checks_place_in_the_chains() -> None:
    from doctor.catalogue_cli import explain_text

    scr002 = explain_text("SCR002").split("Can explain:\n", 1)[1]
    assert "  ART003 <- SCR002: a rank that dies before Score-P flushes" in scr002
    art004 = explain_text("ART004").split("Can be explained by:\n", 1)[1]
    assert "ART004:cuda_802, SCR001, LNC002, GPU003, GPU004, TRN002 -> ART004:fp16_valueerror" in art004
