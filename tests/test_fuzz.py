"""The fuzz suite (issue 20): hostile corpus x every front end, property tests, kill -9 and edit races.

Counted over every run and printed at the end of the test session (see conftest.py):
tracebacks, hangs past --timeout + 5 s, files changed outside the job folder, lost edits,
orphaned processes and planted secrets in any report format. Every count must be 0.
Bounded: the whole module takes well under 3 minutes on two cores.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import fuzz_counts
import pytest
from hostile_corpus import SECRETS, make_corpus
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from remedy_util import make_job, seed_findings, snapshot

from doctor.case import Case

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 5
MEMORY = 1536 * 1024 * 1024
COUNTS = fuzz_counts.COUNTS


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _tree(root: Path, skip: set[Path]) -> dict[str, str]:
    """Path -> kind and SHA-256 of everything under root except the `skip` folders (no FIFO is opened)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        for name in filenames:
            path = here / name
            st_ = os.lstat(path)
            if os.path.islink(path):
                out[str(path)] = "link:" + os.readlink(path)
            elif path.is_file():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[str(path)] = f"mode:{st_.st_mode:o}"
    return out


def _carriers(mark: str) -> list[int]:
    needle = f"FUZZ_MARK={mark}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def run_tool(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """One gpu-doctor command, counted: tracebacks, hangs, orphans."""
    mark = uuid.uuid4().hex
    env = {**os.environ, "FUZZ_MARK": mark}
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "doctor", *argv], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=TIMEOUT + 60, preexec_fn=_limits)
    except subprocess.TimeoutExpired as exc:
        COUNTS["runs"] += 1
        COUNTS["hangs"] += 1
        return subprocess.CompletedProcess(argv, -9, str(exc.stdout or ""), str(exc.stderr or ""))
    took = time.monotonic() - t0
    COUNTS["runs"] += 1
    if took > TIMEOUT + 5:
        COUNTS["hangs"] += 1
        print(f"HANG {took:.1f} s: {argv}")
    if "Traceback" in proc.stderr or "internal error" in proc.stderr:
        COUNTS["tracebacks"] += 1
        print(f"TRACEBACK in {argv}: {proc.stderr[-400:]}")
    deadline = time.monotonic() + 3  # a child killed as the tool exits may take a moment to go
    while (left := [p for p in _carriers(mark) if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    if left:
        COUNTS["orphans"] += len(left)
        print(f"ORPHANS after {argv}: {left}")
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    return proc


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _planted(text: str) -> int:
    return sum(text.count(s) for s in SECRETS.values())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("corpus")
    (root / "outside.txt").write_text("outside every job folder\n")
    return root, make_corpus(root, seed=int(os.environ.get("FUZZ_SEED", "20")))


# Where fix --apply and undo have something hostile to meet (the others only get checked).
WRITTEN = {"doubling", "fifo-job", "fifo-train", "devzero-train", "symlink-loop", "secrets", "state-is-a-file",
           "journal-symlink"}


def test_every_front_end_over_the_hostile_corpus(corpus: tuple[Path, dict[str, Path]],
                                                 tmp_path: Path) -> None:
    root, folders = corpus
    outputs = tmp_path / "out"
    outputs.mkdir()
    # The node layer's torch probe is not what is fuzzed here: an interpreter without torch answers fast.
    python = tmp_path / "python-no-torch"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    python.chmod(0o755)
    case = ["--timeout", str(TIMEOUT), "--python", str(python)]
    for name, folder in folders.items():
        before = _tree(root, {folder})
        run_tool(["--check-only", "--playbook", "scorep-ddp", *case, "--json", str(folder)], root)
        formats = ("json", "md", "html", "tar.gz") if name == "secrets" else ("json",)
        for fmt in formats:
            out = outputs / f"{name}.{fmt}"
            run_tool(["report", str(folder), *case, "-o", str(out), "-q"], root)
            if out.exists():
                COUNTS["planted_secrets"] += _planted_in(out)
        if name in WRITTEN:
            run_tool(["fix", str(folder), "--apply", "--unsafe", "-q", *case], root)
            run_tool(["undo", str(folder)], root)
        if name.endswith("experiment"):
            run_tool(["--check-only", "--playbook", "post-run", *case, "-q", str(folder)], root)
            run_tool(["timeline", str(folder)], root)
        after = _tree(root, {folder})
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        if changed:
            COUNTS["outside_changes"] += len(changed)
            print(f"OUTSIDE CHANGES from {name}: {sorted(changed)[:5]}")
    assert (root / "outside.txt").read_text() == "outside every job folder\n"
    _assert_zero()


def _planted_in(path: Path) -> int:
    if path.name.endswith(".tar.gz"):
        with tarfile.open(path, "r:gz") as tar:
            return sum(_planted(tar.extractfile(m).read().decode("utf-8", "replace"))  # type: ignore[union-attr]
                       for m in tar.getmembers() if m.isfile())
    return _planted(path.read_text(errors="replace"))


def _assert_zero() -> None:
    bad = {k: v for k, v in COUNTS.items() if k not in ("runs", "race_runs") and v}
    assert not bad, f"fuzz counts: {dict(COUNTS)}"


# -- properties of the parsers ------------------------------------------------------------------

# No per-example deadline: on a loaded 2-core runner a slow example is not a defect, and the
# bounds that matter (a hang, a blow-up) are asserted by the tests themselves. Under CI the
# examples are derandomized: the gate runs the same fuzz every time; a local run explores.
DERANDOMIZE = bool(os.environ.get("CI"))
FAST = settings(max_examples=150, deadline=None, derandomize=DERANDOMIZE, database=None if DERANDOMIZE else
                settings.default.database, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.text(max_size=64))
def test_scorep_size_parser_returns_bytes_or_a_size_error(text: str) -> None:
    from doctor.jobfolder.scorep_values import SizeError, parse_size

    try:
        value = parse_size(text)
    except SizeError:
        return
    assert 0 <= value < 2**64


@FAST
@given(st.integers(min_value=0, max_value=2**50))
def test_scorep_sizes_round_trip(n: int) -> None:
    from doctor.jobfolder.scorep_values import format_size, parse_size

    assert parse_size(format_size(n)) == n


@FAST
@given(st.text(max_size=40))
def test_option_parsers_accept_or_refuse_in_one_line(text: str) -> None:
    import argparse

    from doctor.arguments import seconds
    from doctor.launch.bounds import host_address, port_number
    from doctor.probes.p2p import parse_size as p2p_size

    for parse in (seconds(allow_zero=False), seconds(allow_zero=True), port_number, host_address):
        try:
            value = parse(text)
        except argparse.ArgumentTypeError as exc:
            assert "\n" not in str(exc)
            continue
        if parse is port_number:
            assert 1 <= value <= 65535
    try:
        assert 4096 <= p2p_size(text) <= 16 << 30
    except ValueError:
        pass


SHELL_ATOMS = st.sampled_from(["${", "}", "$(", ")", "`", "'", '"', "\\", "$((", "))", "X=$X$X\n", "\n", ";",
                               "if x; then\n", "fi\n", "for i in 1 2; do\n", "done\n", "case $x in a) ;; esac\n",
                               "A=(1 2)\n", "${A[@]}", "${X:-", "export X=", "python -m scorep ", "train.py",
                               "<<EOF\n", "EOF\n", "&&", "|", " ", "é", "\x00", "$'\\n'", "~/", "${#X}"])


@settings(FAST, max_examples=60)
@given(st.lists(SHELL_ATOMS, max_size=200))
def test_any_job_script_is_read_without_raising_and_within_the_bounds(tmp_path_factory: Any,
                                                                      atoms: list[str]) -> None:
    from doctor import limits
    from doctor.jobfolder.discover import load_job

    folder = tmp_path_factory.mktemp("shell")
    (folder / "job.sbatch").write_text("#!/bin/bash\n" + "".join(atoms))
    (folder / "train.py").write_text("import torch\n")
    t0 = time.monotonic()
    job = load_job(Case(root=folder, env={"PATH": "/usr/bin:/bin", "HOME": "/home/u"}))
    # the expansion budget (doctor.limits.ExpansionBudget) bounds the work; this catches a hang
    assert time.monotonic() - t0 < 30
    for var in job.env.values():
        assert var.value is None or len(var.value) <= limits.MAX_VALUE_CHARS * 2


@FAST
@given(st.text(alphabet="ab*&[]{}:,- \n'\"!|>", max_size=200))
def test_the_bounded_yaml_loader_loads_or_refuses(text: str) -> None:
    import yaml

    from doctor.limits import LimitExceeded, bounded_yaml

    try:
        bounded_yaml(text)
    except (yaml.YAMLError, LimitExceeded):
        pass


@FAST
@given(st.text(alphabet=st.characters(codec="ascii", categories=["L", "N", "Zs", "P"]), max_size=40),
       st.sampled_from(["machine h login u password {}", "login with password {}", "passwd: {}",
                        '"db_password": "{} two"', "contact {}@example.org"]))
def test_a_planted_secret_never_survives_redaction(prefix: str, shape: str) -> None:
    from doctor.report.redact import Redactor

    secret = "Qz" + hashlib.sha256(prefix.encode()).hexdigest()[:10]
    out = Redactor().text(f"{prefix} {shape.format(secret)} end")
    if secret in out:
        COUNTS["planted_secrets"] += 1
    assert secret not in out


# -- kill -9 and concurrent edits around apply and undo -------------------------------------------

KILLED_APPLY = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from doctor.case import Case
from doctor.remedy import apply_plan, make_plan
from remedy_util import seed_findings
job = Path(sys.argv[1])
print("ready", flush=True)
apply_plan(make_plan(Case(root=job), seed_findings(job)))
print("applied", flush=True)
"""


def test_kill_9_during_apply_and_undo_loses_nothing(tmp_path: Path) -> None:
    from doctor.remedy import make_plan, undo

    rng = random.Random(9)
    tests = Path(__file__).resolve().parent
    for i in range(6):
        job = make_job(tmp_path / f"job{i}")
        original = snapshot(job)
        planned = {t.path.name: t.after for t in make_plan(Case(root=job), seed_findings(job)).files}
        proc = subprocess.Popen([sys.executable, "-c", KILLED_APPLY, str(job), str(tests)], cwd=REPO,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.08))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        now = snapshot(job)
        for name, data in original.items():
            if now.get(name) not in (data, planned.get(name, data)):
                COUNTS["lost_edits"] += 1
                print(f"TORN {name} after kill -9 at iteration {i}")
        try:
            undo(job)
        except Exception as exc:  # an interrupted apply must always be undoable
            COUNTS["lost_edits"] += 1
            print(f"UNDO FAILED after kill -9 at iteration {i}: {exc}")
        if snapshot(job) != original:
            COUNTS["lost_edits"] += 1
            print(f"NOT RESTORED after kill -9 at iteration {i}")
    _assert_zero()


def test_an_edit_racing_apply_is_never_lost(tmp_path: Path) -> None:
    from doctor.remedy import RemedyError, apply_plan, make_plan, undo

    for i in range(8):
        job = make_job(tmp_path / f"race{i}")
        plan = make_plan(Case(root=job), seed_findings(job))
        target = job / "job.sbatch"
        stop = threading.Event()
        last: list[str] = []

        def edit(target: Path = target, stop: threading.Event = stop, last: list[str] = last,
                 pause: float = 0.0005 * (i % 4)) -> None:
            k = 0
            while not stop.is_set():
                k += 1
                marker = f"# user edit {k}\n"
                with open(target, "r+b") as fh:  # saved in place, as many editors do
                    data = fh.read()
                    fh.seek(0)
                    fh.write(data + marker.encode())
                    fh.truncate()
                last[:] = [marker]
                time.sleep(pause)

        editor = threading.Thread(target=edit)
        editor.start()
        try:
            apply_plan(plan)
        except RemedyError:
            pass  # refused: nothing was written, the edits are the user's
        finally:
            stop.set()
            editor.join()
        if last and last[0] not in target.read_text():
            COUNTS["lost_edits"] += 1
            print(f"LOST EDIT at iteration {i}: {last[0]!r}")
        try:
            undo(job)
        except RemedyError:
            pass  # the file changed after the fix: undo refuses rather than overwrite the edits
        if last and last[0] not in target.read_text():
            COUNTS["lost_edits"] += 1
            print(f"UNDO LOST EDIT at iteration {i}")
    _assert_zero()


def test_two_concurrent_applies_take_turns(tmp_path: Path) -> None:
    job = make_job(tmp_path / "job")
    tests = Path(__file__).resolve().parent
    procs = [subprocess.Popen([sys.executable, "-c", KILLED_APPLY, str(job), str(tests)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=120) for p in procs]
    begins = [json.loads(line) for line in (job / ".gpu-doctor" / "journal.jsonl").read_text().splitlines()
              if '"begin"' in line]
    assert len(begins) == 1, results  # the second saw the first one's files: already applied
    assert sum("applied" in out for out, _err in results) == 2
    shutil.rmtree(job)


# -- compare-and-swap: concurrent applies, apply beside undo, an edit while planning (issue 28) -------
# Each plan is what `fix --apply` does: the journal's history, then the checks (which read the files
# once), then the plan drafted from that read, then the apply. Workers are forked from this warm
# process, so a round's plans and applies really overlap.

RACE_WORKERS = 5


def _shell_checks() -> list[str]:
    """The checks whose remedies edit job.sbatch (five of them, one after the other) and create
    run_ranks.sh: where two drafts of one file can mangle it. The code remedies cost 4x the time."""
    from jobfolder_util import JOB_CHECKS

    return [c for c in JOB_CHECKS if c.startswith(("SCP", "LNC"))]


def _plan_now(job: Path, every_check: bool = False) -> Any:
    from jobfolder_util import HEALTHY, JOB_CHECKS, case_for

    from doctor.remedy import journal, make_plan
    from doctor.runner import run_checks

    node = {name: value for name, value in HEALTHY.items() if name != "logscan"}
    node["scorep_install"] = {"python": "/usr/bin/python3", "notes": ["scorep-config: not found on PATH"]}
    history = journal.history(job)
    run = run_checks(case_for(job), list(JOB_CHECKS) if every_check else _shell_checks(), budget_s=60,
                     preset_facts=node)
    return make_plan(case_for(job), run.findings, facts=run.facts, history=history)


def _race_apply(job: str, every_check: bool = False) -> str:
    from doctor.remedy import RemedyError, apply_plan

    try:
        plan = _plan_now(Path(job), every_check)
        if plan.empty:
            return "nothing"
        return "applied" if apply_plan(plan).tx else "already"
    except RemedyError as exc:
        return f"refused: {exc}"


def _race_undo(job: str) -> str:
    from doctor.remedy import RemedyError, undo

    try:
        return "undone" if undo(Path(job), everything=True).txs else "nothing"
    except RemedyError as exc:
        return f"refused: {exc}"


def _fixed(template: Path, tmp: Path, edit: Any = None, every_check: bool = False) -> dict[str, bytes]:
    """The folder after one plan and apply on a quiet copy (with `edit` made first)."""
    from doctor.remedy import apply_plan

    job = tmp / f"quiet-{uuid.uuid4().hex[:6]}"
    shutil.copytree(template, job)
    if edit is not None:
        edit(job)
    apply_plan(_plan_now(job, every_check))
    out = snapshot(job)
    shutil.rmtree(job)
    return out


def _mangled(what: str, now: dict[str, bytes], allowed: list[dict[str, bytes]]) -> None:
    if now not in allowed:
        COUNTS["mangled"] += 1
        bad = [n for n in now if all(now[n] != a.get(n) for a in allowed)]
        print(f"MANGLED after {what}: {bad}")


@pytest.mark.slow
def test_concurrent_applies_never_mangle_a_file(tmp_path: Path) -> None:
    import multiprocessing

    template = make_job(tmp_path / "template")
    original, fixed = snapshot(template), _fixed(template, tmp_path)
    pool = multiprocessing.get_context("fork").Pool(RACE_WORKERS)
    try:
        for r in range(100 // RACE_WORKERS):  # 100 applies, five at a time on one folder
            job = tmp_path / f"apply{r}"
            shutil.copytree(template, job)
            results = pool.map(_race_apply, [str(job)] * RACE_WORKERS)
            COUNTS["race_runs"] += len(results)
            _mangled(f"round {r}: {results}", snapshot(job), [fixed])
            if sum(r_ == "applied" for r_ in results) != 1:
                COUNTS["mangled"] += 1
                print(f"NOT ONE APPLY in round {r}: {results}")
            from doctor.remedy import undo

            undo(job, everything=True)
            _mangled(f"undo of round {r}", snapshot(job), [original])
            shutil.rmtree(job)
    finally:
        pool.terminate()
    _assert_zero()


@pytest.mark.slow
def test_apply_beside_undo_leaves_the_old_or_the_new_folder(tmp_path: Path) -> None:
    import multiprocessing

    from doctor.remedy import apply_plan, undo

    template = make_job(tmp_path / "template")
    original, fixed = snapshot(template), _fixed(template, tmp_path, every_check=True)
    pool = multiprocessing.get_context("fork").Pool(2)
    try:
        for r in range(20):
            job = tmp_path / f"undo{r}"
            shutil.copytree(template, job)
            apply_plan(_plan_now(job, every_check=True))  # for `undo --all` to undo while the next apply plans
            jobs = [pool.apply_async(_race_undo, (str(job),)), pool.apply_async(_race_apply, (str(job), True))]
            results = [j.get(120) for j in jobs]
            COUNTS["race_runs"] += 1
            _mangled(f"apply beside undo, round {r}: {results}", snapshot(job), [original, fixed])
            undo(job, everything=True)
            _mangled(f"the last undo of round {r}", snapshot(job), [original])
            shutil.rmtree(job)
    finally:
        pool.terminate()
    _assert_zero()


USER_LINE = b"# saved by the user while gpu-doctor planned\n"


def _user_save(job: Path) -> None:
    target = job / "job.sbatch"
    data = target.read_bytes()
    with open(target, "r+b") as fh:  # saved in place, one line added at the top
        fh.write(USER_LINE + data)


@pytest.mark.slow
def test_a_file_saved_while_planning_is_refused_by_name_or_planned_whole(tmp_path: Path) -> None:
    from doctor.remedy import RemedyError, apply_plan

    template = make_job(tmp_path / "template")
    saved = dict(snapshot(template), **{"job.sbatch": USER_LINE + (template / "job.sbatch").read_bytes()})
    fixed_after_save = _fixed(template, tmp_path, _user_save)
    rng = random.Random(28)
    refused = 0
    for r in range(50):
        job = tmp_path / f"edit{r}"
        shutil.copytree(template, job)
        editor = threading.Timer(rng.uniform(0.0, 0.06), _user_save, (job,))
        editor.start()
        plan = _plan_now(job)
        editor.join()
        COUNTS["race_runs"] += 1
        try:
            apply_plan(plan)
        except RemedyError as exc:
            refused += 1
            lines = str(exc).splitlines()
            if len(lines) != 1 or str(job / "job.sbatch") not in lines[0]:
                COUNTS["mangled"] += 1
                print(f"REFUSAL DOES NOT NAME THE FILE in round {r}: {exc}")
        _mangled(f"an edit while planning, round {r}", snapshot(job), [saved, fixed_after_save])
        if USER_LINE not in (job / "job.sbatch").read_bytes():
            COUNTS["lost_edits"] += 1
        shutil.rmtree(job)
    print(f"edit during plan: {refused} of 50 refused, the rest planned on the saved file")
    _assert_zero()
