"""`gpu-doctor report`: every format, planted secrets, the schema, preview, errors, the bundle cap."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from report_util import (
    BEARER,
    NO_NODE,
    PLANTED_ENV,
    SECRET_ENV,
    bundle_files,
    empty_playbook,
    experiments_for,
    leaks,
    logscan_for,
    make_job,
    no_torch_python,
    report_validator,
    secret_check,
)

from doctor.case import Case
from doctor.report import cli


def report(tmp_path: Path, *args: str, facts: dict[str, Any] | None = None) -> int:
    """`gpu-doctor report ARGS` with no checks (the report's own behaviour) and node facts given."""
    playbook = empty_playbook(tmp_path)
    given = NO_NODE if facts is None else facts
    return cli.run_report([*args, "--playbook", str(playbook), "-q"], preset_facts=given)
FORMATS = ("json", "md", "html", "tar.gz")


def preset(root: Path) -> dict[str, Any]:
    """Node facts as a healthy 2-GPU node reports them, plus the artifacts of the planted job."""
    gpus = [{"index": i, "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-1234567{i}-abcd-ef01-2345-6789abcdef01",
             "pci_bus_id": f"00000000:1{i}:00.0", "memory_total": 85520809984} for i in range(2)]
    return {
        "nvml": {"driver_loaded": True, "error": None, "driver_version": "550.54.15",
                 "cuda_driver_version": 12040, "gpus": gpus},
        "cuda_driver": {"api": "driver", "driver_version": 12040, "code": 0, "count": 2},
        "cuda_runtime": {"state": "ready", "ready_attempt": 2, "attempts": [{}, {}],
                         "last": {"runtime_version": 12040, "code": 0}},
        "framework": {"ok": True, "error": None, "torch_version": "2.13.0", "torch_cuda": "12.4",
                      "nccl_version": "2.21.5", "device_count": 2},
        "scorep_install": {"scorep_config": "/opt/scorep/bin/scorep-config", "version": "9.0",
                           "cuda_support": True, "python_bindings": True,
                           "config_summary": "Configure command:\n  ./configure\nCUDA support: yes"},
        "p2p_matrix": {"driver_loaded": True, "gpus": gpus,
                       "views": [{"src": 0, "dst": 1, "cell": "OK", "link": "NV"},
                                 {"src": 1, "dst": 0, "cell": "NS", "link": "SYS"}]},
        "logscan": logscan_for(root),
        "experiments": experiments_for(root),
        "job": {"env": {"HF_TOKEN": SECRET_ENV["HF_TOKEN"], "SCOREP_TOTAL_MEMORY": "3500M",
                        "OMP_NUM_THREADS": "8", "MY_PRIVATE_VAR": "not for support"}},
    }


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One job with planted secrets, reported once in every format (and previewed)."""
    tmp = tmp_path_factory.mktemp("report")
    root = make_job(tmp / "job")
    out: dict[str, Any] = {"root": root, "codes": {}}
    with pytest.MonkeyPatch.context() as mp, secret_check(tmp) as playbook:
        for name, value in PLANTED_ENV.items():
            mp.setenv(name, value)
        mp.setenv("SLURM_JOB_ID", "4242")
        mp.setenv("SLURM_JOB_NODELIST", "gpu[01-02]")
        for fmt in FORMATS:
            target = tmp / f"report.{fmt}"
            argv = [str(root), "-o", str(target), "--playbook", str(playbook), "-q"]
            out["codes"][fmt] = cli.run_report(argv, preset_facts=preset(root))
            out[fmt] = target
    return out


def test_report_exits_with_the_verdict_code_for_every_format(planted: dict[str, Any]) -> None:
    assert planted["codes"] == {fmt: 1 for fmt in FORMATS}  # TST901 fails
    for fmt in FORMATS:
        assert planted[fmt].stat().st_size > 0


@pytest.mark.parametrize("fmt", ("json", "md", "html"))
def test_planted_secrets_appear_in_no_report_format(planted: dict[str, Any], fmt: str) -> None:
    text = planted[fmt].read_text()
    assert leaks(text) == []
    assert "[redacted]" in text


def test_planted_secrets_appear_in_no_bundled_file(planted: dict[str, Any]) -> None:
    files = bundle_files(planted["tar.gz"])
    names = {n.split("/", 1)[1] for n in files}
    assert {"report.json", "report.md", "report.html", "MANIFEST.txt"} <= names
    assert any(n.startswith("logs/") for n in names)
    assert any(n.startswith("scorep/") and n.endswith("scorep.cfg") for n in names)
    assert any(n.startswith("traces/") for n in names)
    assert any(n.startswith("runs/rank1") for n in names)
    for name, text in files.items():
        assert leaks(name) == [], name
        assert leaks(text) == [], f"{name} leaks {leaks(text)}"


def test_bundled_files_keep_what_support_needs(planted: dict[str, Any]) -> None:
    files = {n.split("/", 1)[1]: t for n, t in bundle_files(planted["tar.gz"]).items()}
    cfg = next(t for n, t in files.items() if n.endswith("scorep.cfg"))
    assert "SCOREP_CUDA_ENABLE=kernel,memcpy" in cfg
    assert "SCOREP_SECRET_KEY=[redacted]" in cfg
    excerpt = next(t for n, t in files.items() if n.startswith("logs/"))
    assert "Dropped 85222 records" in excerpt
    assert "https://[redacted]@weights.example.org/ckpt.pt" in excerpt
    doc = json.loads(files["report.json"])
    assert sorted(doc["bundle"]["files"]) == sorted(n for n in files if n not in
                                                    ("report.json", "report.md", "report.html", "MANIFEST.txt"))


def test_json_report_validates_against_the_schema(planted: dict[str, Any]) -> None:
    validator = report_validator()
    doc = json.loads(planted["json"].read_text())
    validator.validate(doc)
    files = bundle_files(planted["tar.gz"])
    bundled = json.loads(next(t for n, t in files.items() if n.endswith("report.json")))
    validator.validate(bundled)
    broken = {**doc, "versions": [{"name": "torch"}]}
    assert not validator.is_valid(broken)
    assert not validator.is_valid({**doc, "checks": [{"id": "bad id"}]})  # the gate's part is checked too


def test_json_report_holds_the_context_support_needs(planted: dict[str, Any]) -> None:
    doc = json.loads(planted["json"].read_text())
    versions = {v["name"]: v["value"] for v in doc["versions"]}
    assert versions["NVIDIA driver"] == "550.54.15"
    assert versions["CUDA driver API"] == "12.4" and versions["CUDA runtime"] == "12.4"
    assert versions["CUDA runtime state"] == "ready at attempt 2 of 2"
    assert versions["torch"] == "2.13.0" and versions["NCCL"] == "2.21.5" and versions["Score-P"] == "9.0"
    assert len(doc["gpus"]) == 2 and all(re.fullmatch(r"GPU-[0-9a-f]{10}", g["uuid"]) for g in doc["gpus"])
    assert "abcd-ef01" not in planted["json"].read_text()
    assert doc["topology"]["rows"] == [["-", "OK NV"], ["NS SYS", "-"]]
    assert doc["slurm"]["job_id"] == "4242"
    assert doc["slurm"]["environment"]["SLURM_JOB_NODELIST"] == "gpu[01-02]"  # hosts kept by default
    check = next(c for c in doc["checks"] if c["id"] == "TST901")
    assert check["status"] == "fail"
    assert check["remedies"] == [{"id": "TST-FIX", "safety": "manual", "applied": True, "verified": True,
                                  "title": "Remove the planted secret (test)"}]
    entry = doc["remedy_journal"]["entries"][0]
    assert (entry["remedy"], entry["check"], entry["action"]) == ("TST-FIX", "TST901", "applied")
    assert entry["verified"] is True
    launch = doc["last_launch"]
    assert [r["exit_code"] for r in launch["ranks"]] == [0, 1] and launch["first_failing_rank"] == 1
    assert [r["status"] for r in launch["ranks"]] == ["done", "failed"]
    assert launch["reason"] == "rank 1 failed first (exit code 1)"
    excerpt = doc["log_excerpts"][0]
    assert excerpt["signature"] == "cupti_dropped" and excerpt["line"] == 4
    assert [ln["n"] for ln in excerpt["lines"]] == [1, 2, 3, 4, 5, 6, 7]
    assert [ln["match"] for ln in excerpt["lines"]].index(True) == 3


def test_environment_is_allow_listed_and_secret_values_masked(planted: dict[str, Any]) -> None:
    doc = json.loads(planted["json"].read_text())
    env = doc["environment"]["process"]
    assert env["SCOREP_SECRET_KEY"] == "[redacted]"
    assert env["SCOREP_CUDA_BUFFER"] == "1M" and env["NCCL_DEBUG"] == "INFO"
    assert env["TORCH_HUB_URL"] == "https://[redacted]@hub.example.org/models"
    for dropped in ("HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "PIP_INDEX_URL", "PATH", "HOME"):
        assert dropped not in env
    assert doc["environment"]["job"] == {"OMP_NUM_THREADS": "8", "SCOREP_TOTAL_MEMORY": "3500M"}
    counts = doc["redaction"]["counts"]
    assert counts["env_not_allowed"] >= 6 and counts["env_secret_value"] >= 1
    assert counts["url_credentials"] >= 2 and counts["bearer_token"] >= 1 and counts["known_secret"] >= 2


def test_markdown_reads_well_in_a_terminal(planted: dict[str, Any]) -> None:
    text = planted["md"].read_text()
    headings = [ln for ln in text.splitlines() if ln.startswith("## ")]
    assert headings == ["## Summary", "## Diagnosis", "## System", "## Versions", "## Score-P configuration", "## GPUs",
                        "## Topology and P2P", "## Slurm job", "## Environment", "## Findings",
                        "## Remedies applied", "## Last launch", "## Where the time goes", "## Log excerpts",
                        "## Redaction"]
    assert text.startswith("# gpu-doctor report: ")
    assert "### TST901 FAIL: Planted secrets (test)" in text
    assert "Last lines of rank 1, the first to fail:" in text and "FP16 Mixed precision" in text
    assert "| TST-FIX | manual | yes | yes | Remove the planted secret (test) |" in text
    assert_tables_intact(text)
    assert_fences_balanced(text)
    assert "\t" not in text and "\r" not in text


def assert_tables_intact(text: str) -> None:
    """Every table row has as many cells as its header; every table has its separator line."""
    lines = text.splitlines()
    i = 0
    tables = 0
    while i < len(lines):
        if lines[i].startswith("| "):
            tables += 1
            width = _cells(lines[i])
            assert re.fullmatch(r"\|(---\|)+", lines[i + 1]), lines[i + 1]
            assert lines[i + 1].count("---") == width
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                assert _cells(lines[i]) == width, f"broken row: {lines[i]!r}"
                i += 1
            assert i == len(lines) or lines[i] == "", "a table must end with a blank line"
        i += 1
    assert tables >= 8


def _cells(row: str) -> int:
    assert row.startswith("| ") and row.endswith(" |"), row
    return len(re.split(r"(?<!\\)\|", row)) - 2


def assert_fences_balanced(text: str) -> None:
    open_fence = None
    for line in text.splitlines():
        m = re.match(r"^(`{3,})", line)
        if m and open_fence is None:
            open_fence = m.group(1)
        elif m and line == open_fence:
            open_fence = None
    assert open_fence is None


def test_html_is_one_self_contained_file(planted: dict[str, Any]) -> None:
    text = planted["html"].read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert re.search(r"<title>gpu-doctor report: .+ \(FAIL\)</title>", text)
    for external in ("<script", "<link", "<img", "<iframe", "url(", "@import", 'src="'):
        assert external not in text
    assert 'id="check-TST901"' in text
    assert "a second finding | with a pipe" in text


def test_preview_prints_the_counts_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    root = make_job(tmp_path / "job")
    monkeypatch.setenv("HF_TOKEN", SECRET_ENV["HF_TOKEN"])
    target = tmp_path / "out.tar.gz"
    code = report(tmp_path, str(root), "-o", str(target), "--preview", facts=preset(root))
    out = capsys.readouterr().out
    assert code == 0
    assert not target.exists() and list(tmp_path.glob("*.tmp")) == []
    assert "nothing written" in out
    assert re.search(r"env_not_allowed\s+\d+", out) and re.search(r"known_secret\s+[1-9]", out)
    assert "logs/" in out and "scorep.cfg" in out
    assert leaks(out) == []


def test_no_redact_keeps_secrets_only_on_request_and_writes_a_private_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET_ENV["HF_TOKEN"])
    target = tmp_path / "raw.json"
    code = report(tmp_path, "-o", str(target), "--no-redact")
    assert code == 0
    doc = json.loads(target.read_text())
    assert doc["environment"]["process"]["HF_TOKEN"] == SECRET_ENV["HF_TOKEN"]
    assert doc["redaction"]["enabled"] is False
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_hash_hosts_hides_the_host_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpunode[07-08]")
    monkeypatch.setenv("SLURMD_NODENAME", "gpunode07")
    target = tmp_path / "r.md"
    assert report(tmp_path, "-o", str(target), "--hash-hosts") == 0
    text = target.read_text()
    assert "gpunode" not in text
    host = Case().host
    if len(host) >= 3 and host != "localhost":
        assert not re.search(rf"(?<![A-Za-z0-9-]){re.escape(host)}(?![A-Za-z0-9-])", text)
    assert re.search(r"# gpu-doctor report: host-[0-9a-f]{10} ", text)


@pytest.mark.parametrize("name, why", [
    ("report.pdf", "cannot tell the report format from"),
    ("missing/report.json", "does not exist"),
])
def test_bad_output_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           name: str, why: str) -> None:
    code = cli.main(["-o", str(tmp_path / name)])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and why in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into a read-only folder")
def test_unwritable_folder_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert cli.main(["-o", str(locked / "r.json")]) == 2
    assert "not writable" in capsys.readouterr().err


def test_output_that_is_a_folder_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r.json").mkdir()
    assert cli.main(["-o", str(tmp_path / "r.json")]) == 2
    assert "it is a folder" in capsys.readouterr().err


def test_missing_output_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "-o FILE is required" in capsys.readouterr().err


def test_write_replaces_the_old_report_atomically(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    target = tmp_path / "out" / "r.json"
    target.write_text("old")
    assert report(tmp_path, "-o", str(target)) == 0
    assert json.loads(target.read_text())["report"]["format_version"]
    assert [p.name for p in target.parent.iterdir()] == ["r.json"]


def test_bundle_cap_leaves_out_extra_files_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_job(tmp_path / "job")
    big = root / "big_rank_0"
    big.mkdir()
    (big / "scorep.cfg").write_text("SCOREP_X=" + "y" * 400_000 + "\n")
    target = tmp_path / "b.tgz"
    facts = preset(root)
    facts["experiments"] = [*facts["experiments"], {"path": str(big)}]
    code = report(tmp_path, str(root), "-o", str(target), "--max-bundle-mb", "0.3", facts=facts)
    assert code == 0
    files = {n.split("/", 1)[1]: t for n, t in bundle_files(target).items()}
    assert not any("big_rank_0" in n and n.endswith("scorep.cfg") for n in files)
    assert "Left out to stay under --max-bundle-mb" in files["MANIFEST.txt"]
    assert "big_rank_0" in files["MANIFEST.txt"]
    assert any(n.startswith("logs/") for n in files)
    assert json.loads(files["report.json"])["bundle"]["left_out"]


def test_bundle_cap_below_the_report_itself_is_exit_2(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "b.tar.gz"
    code = report(tmp_path, "-o", str(target), "--max-bundle-mb", "0.01")
    assert code == 2 and not target.exists()
    assert "over --max-bundle-mb" in capsys.readouterr().err


def test_bearer_token_in_a_rank_log_is_masked_in_the_bundle(planted: dict[str, Any]) -> None:
    files = bundle_files(planted["tar.gz"])
    tail = next(t for n, t in files.items() if "runs/rank0" in n)
    assert "Authorization: Bearer [redacted]" in tail and BEARER not in tail


@pytest.mark.slow
def test_the_real_catalogue_leaks_nothing_either(tmp_path: Path) -> None:
    """`python -m doctor report JOB` with every provider and check there is, planted secrets in the env."""
    root = make_job(tmp_path / "job")
    env = {**os.environ, **PLANTED_ENV}
    validator = report_validator()
    for name in ("r.json", "r.tar.gz"):
        proc = subprocess.run([sys.executable, "-m", "doctor", "report", str(root), "-o", str(tmp_path / name),
                               "--python", str(no_torch_python(tmp_path)), "--timeout", "30", "-q"],
                              env=env, capture_output=True, text=True, timeout=120,
                              cwd=Path(__file__).resolve().parent.parent)
        assert proc.returncode in (0, 1), proc.stderr
        assert leaks(proc.stdout + proc.stderr) == []
    validator.validate(json.loads((tmp_path / "r.json").read_text()))
    assert leaks((tmp_path / "r.json").read_text()) == []
    files = bundle_files(tmp_path / "r.tar.gz")
    assert len(files) >= 6
    for name, text in files.items():
        assert leaks(text) == [], f"{name} leaks {leaks(text)}"
