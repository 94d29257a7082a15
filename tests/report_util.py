"""Helpers for the report tests: a job folder and an environment with planted secrets,
a test check that quotes them in its evidence, and readers for every output format."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from doctor import registry
from doctor.model import Evidence, Layer, fail, warn

# Every value here must appear in no output format and in no bundled file.
SECRET_ENV = {
    "HF_TOKEN": "hf_PlantedHuggingFaceToken0123456789",
    "WANDB_API_KEY": "5f0e1d2c3b4a59687766554433221100ffeeddcc",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYPLANTEDKEY1",
    "SCOREP_SECRET_KEY": "scorep-planted-secret-9f8e7d",
}
ENV_URL_PASSWORD = "EnvUrlPassw0rd"
LOG_URL_PASSWORD = "LogUrlPassw0rd"
BEARER = "PlantedBearerToken.abc123XYZ"
PLANTED_ENV = {
    **SECRET_ENV,
    # allow-listed by its prefix, so only the URL rule protects the password
    "TORCH_HUB_URL": f"https://hubuser:{ENV_URL_PASSWORD}@hub.example.org/models",
    # not allow-listed: left out as a whole
    "PIP_INDEX_URL": "https://pipuser:PipIndexPassw0rd@pypi.example.org/simple",
    "SCOREP_CUDA_BUFFER": "1M",
    "NCCL_DEBUG": "INFO",
    # a personal login: replaced wherever it shows (paths, log lines)
    "USER": "alicetest",
}
FORBIDDEN = (*SECRET_ENV.values(), ENV_URL_PASSWORD, LOG_URL_PASSWORD, BEARER, "PipIndexPassw0rd",
             "hubuser:", "loguser:", "alicetest")

LOG_LINES = [
    "step 10 loss 1.234",
    f"downloading https://loguser:{LOG_URL_PASSWORD}@weights.example.org/ckpt.pt",
    f'curl -H "Authorization: Bearer {BEARER}" https://api.example.org/v1/runs',
    "[CUPTI Activity] Dropped 85222 records. Current buffer size: 1048576 bytes",
    "Proposed minimum SCOREP_CUDA_BUFFER=8889000",
    f"wandb: using key {SECRET_ENV['WANDB_API_KEY']} and HF_TOKEN={SECRET_ENV['HF_TOKEN']}",
    "step 20 loss 1.101 (checkpoint /home/alicetest/ckpt by alicetest)",
]
SIGNATURE_LINE = 4  # 1-based line of the CUPTI warning


# Node facts of a machine without a driver, given in advance so these tests need no probe.
NO_NODE: dict[str, Any] = {
    "nvml": {"driver_loaded": False, "error": "nvmlInit: NVML Shared Library Not Found", "gpus": []},
    "cuda_driver": {"api": "driver", "loaded": False, "load_error": "libcuda.so.1: cannot open shared object"},
    "cuda_runtime": {"state": "error", "attempts": [{}],
                     "last": {"code": 35, "name": "cudaErrorInsufficientDriver"}},
    "framework": {"ok": False, "torch_version": None, "import_error": "ModuleNotFoundError: torch"},
    "p2p_matrix": {"driver_loaded": False, "error": "nvmlInit: NVML Shared Library Not Found"},
}


def no_torch_python(tmp_path: Path) -> Path:
    """An interpreter for the framework probe: this Python without site-packages (no torch)."""
    wrapper = tmp_path / "python-no-torch"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def make_job(root: Path) -> Path:
    """A job folder with a log, a job script and a Score-P experiment, all holding secrets."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.log").write_text("\n".join(LOG_LINES) + "\n")
    (root / "job.sh").write_text(
        "#!/bin/bash\n#SBATCH --gres=gpu:4\n"
        f"export HF_TOKEN={SECRET_ENV['HF_TOKEN']}\n"
        f"export AWS_SECRET_ACCESS_KEY={SECRET_ENV['AWS_SECRET_ACCESS_KEY']}\n"
        "python -m scorep --cuda train.py\n")
    exp = root / "scorep_rank_0"
    exp.mkdir(exist_ok=True)
    (exp / "scorep.cfg").write_text(
        "SCOREP_ENABLE_TRACING=true\nSCOREP_CUDA_ENABLE=kernel,memcpy\n"
        f"SCOREP_SECRET_KEY={SECRET_ENV['SCOREP_SECRET_KEY']}\n"
        f"SCOREP_METRIC_URL=https://loguser:{LOG_URL_PASSWORD}@metrics.example.org\n")
    state = root / ".gpu-doctor"
    run_dir = state / "runs" / "20250101-000000"
    run_dir.mkdir(parents=True, exist_ok=True)
    write_journal(root)
    ranks = []
    for rank in range(2):
        log = run_dir / f"rank_{rank}.log"
        last = "ValueError: FP16 Mixed precision training with AMP or APEX ('--fp16') can only be used on " \
            "CUDA devices." if rank == 1 else "done"
        lines = [f"rank {rank} starting", f"Authorization: Bearer {BEARER}", last]
        log.write_text("\n".join(lines) + "\n")
        ranks.append({"rank": rank, "state": "failed" if rank else "done", "returncode": rank,
                      "pid": 1000 + rank, "log_path": str(log), "last_lines": lines})
    # the launcher's summary.json (doctor.launch.engine)
    (run_dir / "summary.json").write_text(json.dumps({
        "exit_code": 1, "reason": "rank 1 failed first (exit code 1)", "ranks": ranks, "first_failed": 1,
        "run_dir": str(run_dir), "duration_s": 15.2, "world_size": 2, "master": "localhost:29500",
        "stopped_by": "rank 1 failed", "warmup": "CUDA runtime ready at attempt 1"}))
    return root


def write_journal(root: Path) -> None:
    """A journal as `gpu-doctor fix` writes it (doctor.remedy.journal): TST-FIX applied and verified."""
    job_sh = str(root / "job.sh")
    records = [
        {"v": 1, "type": "begin", "tx": "20250101T000000-1", "time": "2025-01-01T00:00:00.000+00:00",
         "root": str(root), "argv": ["fix", "--apply"],
         "remedies": [{"id": "TST-FIX", "safety": "manual", "title": "Remove the planted secret (test)",
                       "checks": ["TST901"], "files": [job_sh]}],
         "files": [{"path": job_sh, "action": "edit", "before_sha256": "ab" * 32, "after_sha256": "cd" * 32,
                    "backup": "backups/20250101T000000-1/0-job.sh.bak", "mode": 0o644}]},
        {"v": 1, "type": "commit", "tx": "20250101T000000-1", "written": [job_sh]},
        {"v": 1, "type": "verify", "tx": "20250101T000000-1",
         "remedies": {"TST-FIX": {"verified": True, "checks": {"TST901": "pass"}, "note": ""}}},
    ]
    (root / ".gpu-doctor" / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def logscan_for(root: Path) -> list[dict[str, Any]]:
    """The `logscan` fact for the planted log, as the artifacts area's contract shapes it."""
    return [{"signature": "cupti_dropped", "file": str(root / "train.log"), "line": SIGNATURE_LINE,
             "text": LOG_LINES[SIGNATURE_LINE - 1],
             "values": {"dropped": 85222, "current_buffer": 1048576, "proposed_buffer": 8889000}}]


def experiments_for(root: Path) -> list[dict[str, Any]]:
    return [{"path": str(root / "scorep_rank_0"), "processes": 1, "cuda_locations": 0,
             "note": f"token {SECRET_ENV['HF_TOKEN']} seen in MANIFEST"}]


def _secret_check(facts: Any) -> Any:
    """What it does: quotes planted secrets in its evidence (test only)."""
    return [
        fail("planted secrets in evidence", evidence=[
            Evidence(f"export HF_TOKEN={SECRET_ENV['HF_TOKEN']}", file="job.sh", line=3),
            Evidence(f"WANDB_API_KEY is {SECRET_ENV['WANDB_API_KEY']}", label="env"),
            Evidence(f"Authorization: Bearer {BEARER}", file="train.log", line=3),
        ], remedies=["TST-FIX"]),
        warn("a second finding | with a pipe and\na newline", evidence="text with `backticks` and | pipe"),
    ]


@contextmanager
def secret_check(tmp_path: Path) -> Iterator[Path]:
    """Register check TST901 (fails, quoting secrets) for the test's duration; yields a playbook file."""
    registry.load()
    registry.check("TST901", Layer.SCOREP, "Planted secrets (test)", remedies=["TST-FIX"])(_secret_check)
    registry.manual_remedy("TST-FIX", "Remove the planted secret (test)", ["edit job.sh"])
    playbook = tmp_path / "secrets.toml"
    playbook.write_text('name = "secrets"\nchecks = ["TST901"]\n')
    try:
        yield playbook
    finally:
        registry.CHECKS.pop("TST901", None)
        registry.REMEDIES.pop("TST-FIX", None)


def empty_playbook(tmp_path: Path) -> Path:
    """A playbook with no checks: the report's own behaviour, whatever the catalogue says."""
    path = tmp_path / "empty.toml"
    path.write_text('name = "empty"\nchecks = []\n')
    return path


def bundle_files(path: Path) -> dict[str, str]:
    """Every member of a .tar.gz bundle, decoded, by name."""
    out = {}
    with tarfile.open(path, "r:gz") as tar:
        for member in tar.getmembers():
            assert member.isfile(), f"{member.name} is not a plain file"
            fh = tar.extractfile(member)
            assert fh is not None
            out[member.name] = io.TextIOWrapper(fh, encoding="utf-8").read()
    return out


SCHEMAS = Path(__file__).resolve().parent.parent / "doctor" / "schemas"


def report_validator() -> Any:
    """A validator for report.schema.json that resolves its `$ref` to gate.schema.json."""
    import jsonschema
    from referencing import Registry, Resource

    schemas = [json.loads((SCHEMAS / name).read_text()) for name in ("gate.schema.json", "report.schema.json")]
    for schema in schemas:
        jsonschema.Draft202012Validator.check_schema(schema)
    registry = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas)
    return jsonschema.Draft202012Validator(schemas[1], registry=registry,
                                           format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def leaks(text: str) -> list[str]:
    return [s for s in FORBIDDEN if s in text]
