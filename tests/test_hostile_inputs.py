"""Hostile job folders: each used to hang, exhaust memory or fail open (issue 20).

Every gate run here is a real subprocess under a memory limit (RLIMIT_AS) and a
wall-clock limit of `--timeout` + 5 s: a regression shows as a MemoryError, a
RecursionError, a pass where the job was not checked, or a run past the limit.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
MEMORY = 1536 * 1024 * 1024
TIMEOUT = 5
SBATCH = "#!/bin/bash\n#SBATCH --gres=gpu:4\n"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def gate(root: Path, *args: str, env: dict[str, str] | None = None, playbook: str = "scorep-ddp",
         code: str | None = None) -> tuple[int, dict[str, Any] | None, str, float]:
    """The gate on `root` (or `code`, a Python program standing in for it): rc, JSON, stderr, seconds."""
    argv = [sys.executable, "-c", code] if code else [sys.executable, "-m", "doctor"]
    argv += ["--check-only", "--playbook", playbook, "--timeout", str(TIMEOUT), "--json", *args, str(root)]
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT + 60, cwd=REPO,
                          preexec_fn=_limit_memory, env=env)
    took = time.monotonic() - t0
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = None
    return proc.returncode, doc, proc.stderr, took


def by_id(doc: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    assert doc is not None, "no JSON verdict"
    return {c["id"]: c for c in doc["checks"]}


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def no_internal_failure(doc: dict[str, Any] | None, stderr: str) -> None:
    text = json.dumps(doc) + stderr
    for word in ("MemoryError", "RecursionError", "Traceback", "internal error"):
        assert word not in text, word


def test_a_variable_doubled_sixty_times_stays_small(tmp_path: Path) -> None:
    doubling = "\n".join(['CHUNK="$CHUNK$CHUNK"'] * 60)
    root = write(tmp_path / "job", {"job.sbatch": SBATCH + f"CHUNK=0123456789abcdef\n{doubling}\n"
                                    "export SCOREP_TOTAL_MEMORY=$CHUNK\npython -m scorep --cuda train.py\n",
                                    "train.py": "import torch\n"})
    rc, doc, err, took = gate(root, "--only", "SCP003")
    no_internal_failure(doc, err)
    assert took < TIMEOUT + 5
    assert by_id(doc)["SCP003"]["status"] == "unknown"


def test_parameter_expansion_nested_a_thousand_deep(tmp_path: Path) -> None:
    word = "${OUT:-" * 1000 + "prof" + "}" * 1000
    root = write(tmp_path / "job", {"job.sbatch": SBATCH + f"export SCOREP_EXPERIMENT_DIRECTORY={word}\n"
                                    "python -m scorep --cuda train.py\n", "train.py": "import torch\n"})
    rc, doc, err, took = gate(root, "--only", "SCP006", "--only", "SCP003")
    no_internal_failure(doc, err)
    assert took < TIMEOUT + 5
    assert {c["status"] for c in by_id(doc).values()} <= {"pass", "unknown", "warn", "fail"}


def test_three_thousand_nested_if_blocks_are_refused_within_the_timeout(tmp_path: Path) -> None:
    body = "if true; then\n" * 3000 + "python -m scorep --cuda train.py\n" + "fi\n" * 3000
    root = write(tmp_path / "job", {"job.sbatch": SBATCH + body, "train.py": "import torch\n"})
    rc, doc, err, took = gate(root, "--only", "LNC001")
    no_internal_failure(doc, err)
    assert took < TIMEOUT + 5
    check = by_id(doc)["LNC001"]
    assert check["status"] == "unknown" and "job.sbatch" in check["message"] and "nested" in check["message"]
    assert rc == 1  # the job was not checked: never a pass


def _alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    lines.append(f"fp16: *a{levels - 1}")
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_as_trainer_config_is_refused_and_named(tmp_path: Path) -> None:
    root = write(tmp_path / "job", {"job.sbatch": SBATCH + "torchrun --nproc_per_node 2 train.py config.yaml\n",
                                    "train.py": "import torch\n", "config.yaml": _alias_bomb()})
    rc, doc, err, took = gate(root, "--only", "TRN002")
    no_internal_failure(doc, err)
    assert took < TIMEOUT + 5
    check = by_id(doc)["TRN002"]
    assert check["status"] == "unknown" and "config.yaml" in check["message"] and "alias" in check["message"]
    assert rc == 1


def test_a_four_megabyte_training_script_is_not_analysed_and_says_so(tmp_path: Path) -> None:
    big = "import torch\n" + "values = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]\n" * 80_000
    root = write(tmp_path / "job", {"job.sbatch": SBATCH + "python -m scorep --cuda train.py\n", "train.py": big})
    assert (root / "train.py").stat().st_size > 3 * 2**20
    rc, doc, err, took = gate(root, "--only", "SCR001")
    no_internal_failure(doc, err)
    assert took < TIMEOUT + 5
    check = by_id(doc)["SCR001"]
    assert check["status"] == "unknown" and "train.py" in check["message"] and "limit" in check["message"]
    assert rc == 1


def test_a_job_path_of_dev_zero_is_not_ok(tmp_path: Path, fake_node) -> None:  # type: ignore[no-untyped-def]
    root = write(tmp_path / "job", {"job.sbatch": SBATCH + "export PATH=/dev/zero\npython train.py\n",
                                    "train.py": "import torch\n"})
    rc, doc, err, took = gate(root, "--only", "GPU004", env=fake_node("healthy"))
    check = by_id(doc)["GPU004"]
    assert check["status"] != "pass" and "/dev/zero" in check["message"]
    assert rc == 1


# A gate whose job probe meets input that still exhausts the stack, or never returns.
FAILING_PROBE = textwrap.dedent("""
    import sys, time
    from doctor import limits
    from doctor.jobfolder import facts
    def hostile(case):
        limits.note_reading(str(case.root / "job.sbatch"))
        {action}
    facts.load_job = hostile
    from doctor.cli import main
    sys.argv = ["gpu-doctor", *sys.argv[1:]]
    sys.exit(main())
""")


def test_a_probe_that_hits_recursion_makes_job_checks_unknown_naming_the_file(tmp_path: Path) -> None:
    root = write(tmp_path / "job", {"job.sbatch": SBATCH + "python -m scorep --cuda train.py\n"})
    code = FAILING_PROBE.format(action="def deeper(n): return deeper(n + 1)\n    deeper(0)")
    rc, doc, err, took = gate(root, "--only", "SCP003", "--only", "SCP006", code=code)
    assert rc == 1
    for check in by_id(doc).values():
        assert check["status"] == "unknown" and "job.sbatch" in check["message"], check


def test_a_probe_that_never_returns_ends_at_the_timeout_naming_the_file(tmp_path: Path) -> None:
    root = write(tmp_path / "job", {"job.sbatch": SBATCH + "python -m scorep --cuda train.py\n"})
    rc, doc, err, took = gate(root, "--only", "SCP003", code=FAILING_PROBE.format(action="time.sleep(600)"))
    assert took < TIMEOUT + 5, f"the gate ran {took:.1f} s with --timeout {TIMEOUT}"
    assert rc == 1
    check = by_id(doc)["SCP003"]
    assert check["status"] == "timeout" and "job.sbatch" in check["message"]


@pytest.fixture
def planted_fifos(tmp_path: Path) -> Path:
    """A run folder whose scorep.cfg, MANIFEST.md, traces.def, .evt and log are FIFOs or /dev/zero."""
    root = tmp_path / "run"
    rank0, rank1 = root / "scorep_rank_0", root / "scorep_rank_1"
    (rank0 / "traces").mkdir(parents=True)
    rank1.mkdir()
    for path in (rank0 / "scorep.cfg", rank0 / "MANIFEST.md", rank0 / "traces.def", rank0 / "traces" / "0.evt",
                 root / "train.log"):
        os.mkfifo(path)
    (rank0 / "traces.otf2").write_bytes(b"")
    (rank1 / "scorep.cfg").symlink_to("/dev/zero")
    (root / "rank1.log").symlink_to("/dev/zero")
    return root


def test_fifos_and_dev_zero_in_a_run_folder_are_named_never_read(planted_fifos: Path) -> None:
    root = planted_fifos
    rc, doc, err, took = gate(root, "--log", str(root / "train.log"), "--log", str(root / "rank1.log"),
                              playbook="post-run")
    no_internal_failure(doc, err)
    assert took < TIMEOUT + 5
    text = json.dumps(doc)
    fifo = "not a regular file but a FIFO"
    assert f"scorep.cfg unreadable: {fifo}" in text and f"MANIFEST.md unreadable: {fifo}" in text
    assert "but a character device" in text and f"train.log: cannot read: {fifo}" in text
    assert rc == 1


def test_timeline_and_report_never_block_on_a_fifo(planted_fifos: Path, tmp_path: Path) -> None:
    root = planted_fifos
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "doctor", "timeline", str(root)], capture_output=True,
                          text=True, timeout=60, cwd=REPO, preexec_fn=_limit_memory)
    assert time.monotonic() - t0 < 15 and proc.returncode == 2
    assert "traces.def: not a regular file but a FIFO" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "doctor", "report", str(root), "--playbook", "post-run",
                           "--timeout", str(TIMEOUT), "-o", str(tmp_path / "r.tar.gz"), "-q"],
                          capture_output=True, text=True, timeout=60, cwd=REPO, preexec_fn=_limit_memory)
    assert proc.returncode in (0, 1), proc.stderr
    assert (tmp_path / "r.tar.gz").stat().st_size > 0


# A gate whose Python analysis may take `bound` seconds (limits.MAX_PYTHON_SECONDS, 10 s in use).
BOUNDED_ANALYSIS = textwrap.dedent("""
    import sys
    from doctor import limits
    limits.MAX_PYTHON_SECONDS = {bound}
    from doctor.cli import main
    sys.argv = ["gpu-doctor", *sys.argv[1:]]
    sys.exit(main())
""")


def _token_table_script(entries: int = 40_000) -> str:
    """A small training script with a token table inline: a few hundred KB, ~100 000 AST nodes."""
    table = ", ".join(f'"t{i}": {i}' for i in range(entries))
    return ("import scorep.user\nimport torch\nimport torch.distributed as dist\n\n"
            f"VOCAB = {{{table}}}\n\n"
            "def main():\n    dist.init_process_group('nccl')\n    print(len(VOCAB))\n\n"
            "if __name__ == '__main__':\n    main()\n")


def test_a_python_analysis_past_its_time_bound_is_unknown_naming_file_and_bound(tmp_path: Path) -> None:
    """MAX_PYTHON_SECONDS was defined but read by nothing: a slow analysis ran to its end. With the
    bound patched down to 1 ms, the table script (hundreds of ms to walk on any machine) is stopped."""
    root = write(tmp_path / "job", {"job.sbatch": SBATCH + "srun python -m scorep --cuda train.py\n",
                                    "train.py": _token_table_script()})
    assert (root / "train.py").stat().st_size < limits_bytes()
    rc, doc, err, _took = gate(root, "--only", "SCR001", "--only", "SCR002",
                               code=BOUNDED_ANALYSIS.format(bound=0.001))
    no_internal_failure(doc, err)
    for check_id in ("SCR001", "SCR002"):
        check = by_id(doc)[check_id]
        assert check["status"] == "unknown", check
        assert "cannot analyse train.py: analysis stopped after 0.001 s, the time limit for analysis" \
            in check["message"], check["message"]
    assert rc == 1  # the job was not checked: never a pass
    # within a bound it can keep, the same script is analysed: it never calls destroy_process_group()
    rc, doc, err, _took = gate(root, "--only", "SCR002", code=BOUNDED_ANALYSIS.format(bound=60))
    check = by_id(doc)["SCR002"]
    assert check["status"] == "fail" and "never calls destroy_process_group" in check["message"], check


def limits_bytes() -> int:
    from doctor.limits import MAX_PYTHON_BYTES

    return MAX_PYTHON_BYTES
