"""`gpu-doctor fix` and `gpu-doctor undo` end to end, with the real job-folder checks."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from examples_util import EXAMPLES
from remedy_util import make_job, snapshot

from doctor.case import Case
from doctor.cli import main
from doctor.model import Status
from doctor.remedy import transactions
from doctor.remedy.journal import records
from doctor.remedy.verify import CONFIG_LAYERS, run_job_checks

EXAMPLE = EXAMPLES / "scorep-ddp-broken"
# What no edit of the job folder can fix on this machine: Score-P is not installed here
# (SCP001), torch has no CUDA here (TRN002), the node is not probed by `fix` (LNC003).
MACHINE = {"SCP001", "TRN002", "LNC003"}


def fix(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["fix", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def automatic_findings(job: Path) -> dict[str, set[str]]:
    """Check ID -> the automatic remedies its open findings name."""
    from doctor import registry

    out: dict[str, set[str]] = {}
    for f in run_job_checks(Case(root=job)).findings:
        if f.status in (Status.PASS, Status.SKIP):
            continue
        auto = {r for r in f.remedies if r in registry.REMEDIES and registry.REMEDIES[r].plan is not None}
        if auto:
            out.setdefault(f.check_id, set()).update(auto)
    return out


def fix_whole_folder(capsys: pytest.CaptureFixture[str], job: Path) -> None:
    before_files = snapshot(job)
    before = automatic_findings(job)
    assert before, "the broken folder raises findings with automatic remedies"
    code, out, err = fix(capsys, str(job), "--apply", "--unsafe")
    assert code == 0, out + err
    applied = {line.split(":")[0] for line in out.splitlines() if line.endswith(": verified")}
    assert applied >= {r for rs in before.values() for r in rs} - {"cuda-warmup", "scorep-per-rank-dirs"}
    assert "NOT verified" not in out
    verify = [r for r in records(job) if r["type"] == "verify"][-1]["remedies"]
    assert verify and all(v["verified"] is True for v in verify.values()), verify
    after = run_job_checks(Case(root=job))
    # The artifacts layer reads the last run's logs and traces: only a new run changes it.
    for check_id in before:
        res = after.result(check_id)
        assert res is not None
        if res.layer in CONFIG_LAYERS:
            assert res.status == Status.PASS, (check_id, res.message)
    left = {r.check_id for r in after.results
            if r.layer in CONFIG_LAYERS and r.status not in (Status.PASS, Status.SKIP)}
    assert left <= MACHINE, left
    code, out, _ = fix(capsys, str(job), "--apply", "--unsafe")
    assert code == 0 and "nothing to apply" in out
    assert len(transactions(job)) == 1
    assert main(["undo", str(job)]) == 0
    assert snapshot(job) == before_files


def test_fix_apply_unsafe_on_the_seed_folder_passes_the_checks_and_undo_restores(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fix_whole_folder(capsys, make_job(tmp_path / "job"))


def test_fix_apply_unsafe_on_a_copy_of_the_broken_example(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    if not EXAMPLE.is_dir():
        pytest.skip("examples/scorep-ddp-broken is not in this tree")
    job = tmp_path / "broken"
    shutil.copytree(EXAMPLE, job)
    fix_whole_folder(capsys, job)


def test_fix_without_flags_lists_the_plan_and_writes_nothing(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    job = make_job(tmp_path / "job")
    before = snapshot(job)
    code, out, err = fix(capsys, str(job))
    assert code == 0
    assert "safe    scorep-total-memory" in out and "env         job.sbatch:9  SCOREP_TOTAL_MEMORY=4G -> 3500M" in out
    assert "unsafe  lazy-scorep-import" in out and "(needs --unsafe)" in out
    assert "manual  manual-scorep-install" in out and "scorep-config --version" in out
    assert f"Preview: gpu-doctor fix {job} --diff" in out
    assert "checking" in err
    assert snapshot(job) == before and not (job / ".gpu-doctor").exists()


def test_fix_diff_shows_safe_changes_and_unsafe_ones_only_when_asked(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    job = make_job(tmp_path / "job")
    code, out, _ = fix(capsys, str(job), "--diff")
    assert code == 0
    assert "--- a/job.sbatch\n+++ b/job.sbatch\n" in out and "-export SCOREP_TOTAL_MEMORY=4G\n" in out
    assert "+++ b/train.py" not in out and "run_ranks.sh" not in out
    _, out, _ = fix(capsys, str(job), "--diff", "--unsafe")
    assert "+++ b/train.py" in out and "--- /dev/null\n+++ b/run_ranks.sh" in out
    assert not (job / ".gpu-doctor").exists()


def test_fix_only_applies_just_that_remedy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = make_job(tmp_path / "job")
    original = (job / "job.sbatch").read_text()
    code, out, _ = fix(capsys, str(job), "--apply", "--only", "scorep-total-memory")
    assert code == 0 and "scorep-total-memory: verified" in out
    assert (job / "job.sbatch").read_text() == original.replace("=4G", "=3500M")
    assert "gpu-doctor fix: applied 1 remedy (" in out  # was "applied 1 remedies"


def test_fix_counts_in_words_one_remedy_one_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One remedy offered: the listing says "1 remedy for N findings" (was "1 remedies")."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "run.sh").write_text("#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=4G\n"
                                "python -m scorep --cuda --noinstrumenter train.py\n")
    (job / "train.py").write_text("print('hello')\n")
    code, out, _ = fix(capsys, str(job), "--only", "scorep-total-memory")
    assert code == 0
    head = out.splitlines()[0]
    assert re.fullmatch(rf"gpu-doctor fix: 1 remedy for (1 finding|([02-9]|\d\d+) findings) in {job}", head), head


def test_fix_refuses_a_read_only_script_and_changes_nothing(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    job = make_job(tmp_path / "job")
    (job / "job.sbatch").chmod(0o444)
    before = snapshot(job)
    code, out, err = fix(capsys, str(job), "--apply")
    assert code == 2
    assert f"gpu-doctor: error: {job}/job.sbatch: the file is read-only" in err
    assert snapshot(job) == before


@pytest.mark.parametrize("argv,message", [
    (["--only", "no-such-remedy"], "unknown remedy ID 'no-such-remedy'"),
    (["--findings", "/nonexistent.json"], "--findings /nonexistent.json: cannot read"),
])
def test_fix_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              argv: list[str], message: str) -> None:
    job = make_job(tmp_path / "job")
    code, out, err = fix(capsys, str(job), *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_fix_on_a_missing_folder_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = fix(capsys, str(tmp_path / "nope"))
    assert code == 2 and "does not exist" in err


def test_findings_of_a_node_verdict_give_the_sbatch_exclude(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    job = make_job(tmp_path / "job")
    verdict = {"checks": [{"id": "GPU003", "layer": "node", "findings": [
        {"status": "fail", "message": "never ready within 45 s", "evidence": [], "entities": {"host": "node17"},
         "remedies": ["exclude-node"], "data": {}}]}]}
    (tmp_path / "verdict.json").write_text(json.dumps(verdict))
    code, out, _ = fix(capsys, str(job), "--findings", str(tmp_path / "verdict.json"), "--apply",
                       "--only", "exclude-node")
    assert code == 0, out
    assert "#SBATCH --time=01:00:00\n#SBATCH --exclude=node17\n" in (job / "job.sbatch").read_text()


def test_undo_with_nothing_applied_and_the_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = make_job(tmp_path / "job")
    assert main(["undo", str(job)]) == 0
    assert "nothing to undo" in capsys.readouterr().out
    fix(capsys, str(job), "--apply")
    assert main(["undo", str(job), "--list"]) == 0
    listed = capsys.readouterr().out
    assert "applied" in listed and "scorep-total-memory" in listed
    assert main(["undo", str(job / "job.sbatch")]) == 0  # a file as PATH means its folder (issue 17)
    assert "is a file: examining its folder" in capsys.readouterr().err


def test_a_manual_step_with_a_code_block_is_one_numbered_step_with_its_lines_under_it() -> None:
    from doctor import registry
    from doctor.remedy.model import RemedyPlan
    from doctor.remedy_cli import _steps

    rem = registry.remedy_for("node-cuda-warmup")
    assert rem is not None
    plan = RemedyPlan(rem.id, rem.safety, rem.title, ("GPU003",), steps=tuple(rem.steps), status="manual")
    lines = _steps(plan)
    numbered = [ln.strip().split(".", 1)[0] for ln in lines if re.match(r"\s+\d+\. ", ln)]
    assert numbered == ["1", "2", "3"]  # the loop is not steps 2-7
    loop = lines.index("                   for attempt in $(seq 1 30); do")
    assert lines[loop + 5] == "                   done" and lines[loop + 6].startswith("            2. Run it with")
