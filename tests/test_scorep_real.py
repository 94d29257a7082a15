"""gpu-doctor against real Score-P 8.4 + scorep 4.5.1 (marker `scorep`).

Every Score-P message asserted here was printed by real Score-P in the test itself,
through gpu-doctor's real commands (launch, --check-only, fix, timeline, report).
The stand-in tests/fake_scorep stays where real Score-P cannot do the job: the
launcher's process-control tests (signals, hangs, output floods: they need a rank
that behaves on command, and real Score-P adds seconds per rank), the Slurm tests
(the ranks run inside network namespaces of a throwaway cluster), and the per-rank
launch remedy's test (only the stand-in records the argv and environment it was given).

Cost: the Python instrumenter traces `import torch` (~800 000 region visits per rank);
two tests do that for real (the default-memory abort stops after ~2 s), the rest use
`--noinstrumenter` with user regions, a filter, or a script without torch.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import otf2
import pytest
from launch_util import TEARDOWN_ABORT
from scorep_real import (
    HELLO,
    PYTHON,
    TORCHRUN_WRAPPER,
    TRAIN,
    checks,
    findings,
    gpu_doctor,
    require,
    run_scorep,
    scorep_env,
    write,
)

pytestmark = [pytest.mark.scorep, pytest.mark.slow]

LOOP = '''#!/bin/bash
# one `python -m scorep` per rank, each with its own experiment folder
export MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 WORLD_SIZE=2
{exports}for r in 0 1; do
  RANK=$r SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$r python -m scorep {flags}train.py > rank_$r.log 2>&1 &
done
wait
'''


@pytest.fixture(scope="module")
def scorep() -> Path:
    return require()


def job_folder(tmp_path: Path, flags: str = "", exports: str = "") -> Path:
    write(tmp_path, "train.py", TRAIN)
    write(tmp_path, "run.sh", LOOP.format(flags=flags, exports=exports))
    return tmp_path


def check_only(folder: Path, env: dict[str, str], playbook: str = "scorep-ddp") -> dict[str, dict]:
    res = gpu_doctor(["--check-only", "--playbook", playbook, "--json", str(folder)], env, folder)
    assert res.returncode in (0, 1), res.stderr
    return checks(res.stdout)


def read_trace(anchor: Path) -> tuple[int, set[str]]:
    """(events, region names) of a real OTF2 trace, read with the otf2 package."""
    events = 0
    with otf2.reader.open(str(anchor)) as trace:
        names = {r.name for r in trace.definitions.regions}
        for _location, _event in trace.events:
            events += 1
    return events, names


def launch(folder: Path, env: dict[str, str], flags: str | None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`gpu-doctor launch` of train.py on 2 ranks; once more if torch's gloo teardown aborted a rank
    at exit (a torch 2.13 flake, also without Score-P: see tests/launch_util.py)."""
    for attempt in (1, 2):
        shutil.rmtree(folder / "logs", ignore_errors=True)
        for old in folder.glob("scorep_rank_*"):
            shutil.rmtree(old)
        # flags None: the issue's own command line (default flags, CUDA warm-up), logs kept in the folder
        options = ["--scorep-flags", flags, "--no-warmup"] if flags is not None else []
        res = gpu_doctor(["launch", "--nproc", "2", "--instrument", "scorep", *options, "--plain",
                          "--run-dir", "logs", "--", "train.py"], env, folder, timeout)
        aborted = any(TEARDOWN_ABORT in log.read_text(errors="replace") for log in (folder / "logs").glob("*.log"))
        if not (aborted and res.returncode != 0 and attempt == 1):
            return res
    raise AssertionError("unreachable")


def test_build_script_reuses_the_finished_install(scorep: Path) -> None:
    res = subprocess.run(["bash", "scripts/build-scorep.sh", str(Path(PYTHON).parent.parent)],
                         cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "reusing" in res.stdout and f"Score-P 8.4 at {scorep}" in res.stdout
    assert (Path(PYTHON).parent.parent / "scorep-prefix").read_text().strip() == str(scorep)


def test_launch_two_ranks_measured_with_user_regions_then_timeline_and_report(scorep: Path, tmp_path: Path) -> None:
    job_folder(tmp_path)
    env = scorep_env(scorep, SCOREP_ENABLE_TRACING="true")
    res = launch(tmp_path, env, "--noinstrumenter")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "SCOREP_TOTAL_MEMORY=256M for each rank" in res.stderr
    assert "2/2 ranks measured" in res.stderr
    for rank in (0, 1):
        folder = tmp_path / f"scorep_rank_{rank}"
        assert "SCOREP_TOTAL_MEMORY=256M\n" in (folder / "scorep.cfg").read_text()   # Score-P's own record
        events, names = read_trace(folder / "traces.otf2")
        assert "user:train_step" in names and events >= 6   # 3 steps, enter + leave
    timeline = gpu_doctor(["timeline", "--json", str(tmp_path)], env, tmp_path)
    assert timeline.returncode == 0, timeline.stderr
    [run] = json.loads(timeline.stdout)["runs"]
    assert run["source"] == "trace" and run["ranks"] == 2
    for rank in run["rank_timelines"]:
        assert rank["steps"]["region"] == "user:train_step" and rank["steps"]["count"] == 3
    report = gpu_doctor(["report", "--playbook", "post-run", "-o", str(tmp_path / "report.md"), str(tmp_path)],
                        env, tmp_path)
    assert report.returncode in (0, 1), report.stderr
    body = (tmp_path / "report.md").read_text()
    assert "Passed or skipped without remark: ART001, ART002, ART003, ART004, ART005, ART006." in body
    assert "2 ranks, from traces (timeline)" in body and "| rank 1 | 3 |" in body   # 3 steps per rank


def test_default_memory_aborts_every_rank_and_scp009_names_the_value(scorep: Path, tmp_path: Path) -> None:
    job_folder(tmp_path)
    env = scorep_env(scorep)
    before = check_only(tmp_path, env)["SCP009"]
    assert before["status"] == "fail" and "16000k" in before["message"]
    assert findings(before, "fail")[0]["data"]["proposed"] == "256M"

    env["SCOREP_TOTAL_MEMORY"] = "16000k"                 # the default, set by the user
    res = launch(tmp_path, env, "")
    assert "warning: SCOREP_TOTAL_MEMORY=16000k cannot hold" in res.stderr   # before starting
    assert res.returncode == 134, res.stderr[-2000:]      # SIGABRT
    assert "0/2 ranks measured" in res.stderr
    log = (tmp_path / "logs" / "rank_0.log").read_text()
    assert ("[Score-P] src/measurement/SCOREP_Memory.c:187: Error: No free memory page available: Out of memory. "
            "Please increase SCOREP_TOTAL_MEMORY=16375808 and try again.") in log
    assert not list((tmp_path / "scorep_rank_0").glob("traces*"))

    after = check_only(tmp_path, scorep_env(scorep))
    art004 = [f for f in after["ART004"]["findings"] if f["data"].get("signature") == "scorep_oom"]
    assert art004 and art004[0]["status"] == "fail" and art004[0]["data"]["total_memory"] == 16375808
    assert after["ART003"]["status"] == "fail"
    oom = [f for f in findings(after["SCP009"], "fail") if "ran out" in f["message"]]
    assert oom and oom[0]["data"]["proposed"] == "256M" and oom[0]["data"]["ranks"] == [0, 1]


def test_full_instrumenter_callpath_warning_and_the_filter_remedy(scorep: Path, tmp_path: Path) -> None:
    """The one run that traces all of `import torch`: gpu-doctor's per-rank memory holds it."""
    job_folder(tmp_path)
    env = scorep_env(scorep, SCOREP_ENABLE_TRACING="true")
    res = launch(tmp_path, env, None)   # default flags "--cuda --thread=pthread"
    assert res.returncode == 0, res.stderr[-3000:]
    assert "was built without CUDA support (scorep-info config-summary): measuring without --cuda" in res.stderr
    assert "SCOREP_TOTAL_MEMORY=256M for each rank" in res.stderr
    assert "2/2 ranks measured" in res.stderr
    log = (tmp_path / "logs" / "rank_0.log").read_text()
    m = re.search(r"Score-P callpath depth limitation of 100 exceeded\.\nReached callpath depth was (\d+)\.\n"
                  r"Consider setting SCOREP_PROFILING_MAX_CALLPATH_DEPTH to (\d+)\.", log)
    assert m and m.group(1) == m.group(2), log[-2000:]
    unfiltered = sum(f.stat().st_size for f in (tmp_path / "scorep_rank_0").rglob("*") if f.is_file())
    assert unfiltered > 5 << 20

    found = check_only(tmp_path, scorep_env(scorep))["SCP010"]
    depth = [f for f in found["findings"] if f["data"].get("var") == "SCOREP_PROFILING_MAX_CALLPATH_DEPTH"]
    assert depth and depth[0]["status"] == "warn" and depth[0]["data"]["proposed"] == int(m.group(2))
    [heavy] = [f for f in found["findings"] if f["data"].get("var") == "SCOREP_FILTERING_FILE"]
    assert heavy["status"] == "warn" and heavy["data"]["visits"] > 100_000   # the profile's scorep-score view
    assert "torch" in heavy["data"]["exclude_modules"] and "user" not in heavy["data"]["exclude_modules"]

    fix = gpu_doctor(["fix", str(tmp_path), "--only", "scorep-filter-file", "--apply"], env, tmp_path)
    assert fix.returncode == 0, fix.stdout + fix.stderr
    assert "export SCOREP_FILTERING_FILE=scorep.filter" in (tmp_path / "run.sh").read_text()
    assert "  EXCLUDE " in (tmp_path / "scorep.filter").read_text() and " torch:* torch.* " in \
        (tmp_path / "scorep.filter").read_text()   # the heaviest modules of the profile run
    env["SCOREP_FILTERING_FILE"] = str(tmp_path / "scorep.filter")
    res = launch(tmp_path, env, "--thread=pthread")
    assert res.returncode == 0 and "2/2 ranks measured" in res.stderr, res.stderr[-3000:]
    filtered = sum(f.stat().st_size for f in (tmp_path / "scorep_rank_0").rglob("*") if f.is_file())
    _events, names = read_trace(tmp_path / "scorep_rank_0" / "traces.otf2")
    assert "user:train_step" in names and not any(n.startswith("torch.") for n in names)
    assert filtered * 8 < unfiltered   # measured: ~2.5 MB instead of ~40 MB per rank


def test_scorep_around_torchrun_measures_only_the_launcher(scorep: Path, tmp_path: Path) -> None:
    write(tmp_path, "train.py", TRAIN)
    write(tmp_path, "torchrun_wrapper.py", TORCHRUN_WRAPPER)
    write(tmp_path, "run.sh", "#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=256M SCOREP_ENABLE_TRACING=true\n"
                              "python -m scorep torchrun_wrapper.py --nproc_per_node 2 --master_port 29518 "
                              "train.py --os-exit > train.log 2>&1\n")   # the workers are not measured
    env = scorep_env(scorep)
    before = check_only(tmp_path, env)
    assert before["LNC001"]["status"] == "fail"
    res = subprocess.run(["bash", "run.sh"], cwd=tmp_path, env=env, timeout=300)
    assert res.returncode == 0
    log = (tmp_path / "train.log").read_text()
    assert "rank 1 step 3" in log                        # the workers trained...
    [exp] = list(tmp_path.glob("scorep-*"))              # ...but one experiment folder
    _events, names = read_trace(exp / "traces.otf2")
    assert "torch.distributed.run:main" in names and "user:train_step" not in names
    after = check_only(tmp_path, env, "post-run")
    assert after["ART001"]["status"] == "fail" and "only the launcher" in after["ART001"]["message"]


@pytest.mark.parametrize("case", ["dashdash", "cuda", "4G"])
def test_wrapper_failures_found_in_real_logs_and_before_the_run(scorep: Path, tmp_path: Path, case: str) -> None:
    flags, env_extra = {"dashdash": ("-- ", {}), "cuda": ("--cuda ", {}),
                        "4G": ("", {"SCOREP_TOTAL_MEMORY": "4G"})}[case]
    exports = "".join(f"export {k}={v}\n" for k, v in env_extra.items())
    write(tmp_path, "hello.py", HELLO)
    write(tmp_path, "run.sh", f"#!/bin/bash\n{exports}python -m scorep {flags}hello.py > run.log 2>&1\n")
    env = scorep_env(scorep, **env_extra)
    before = check_only(tmp_path, scorep_env(scorep))
    proc = run_scorep([*flags.split(), "hello.py"], env, tmp_path, tmp_path / "run.log")
    log = (tmp_path / "run.log").read_text()
    after = check_only(tmp_path, scorep_env(scorep))
    signatures = {f["data"].get("signature"): f for f in after["ART004"]["findings"]}
    if case == "dashdash":
        assert proc.returncode == 1
        assert "ValueError: given config ['--', '--user'] is not supported" in log
        assert "strerr: [Score-P] ERROR: Unknown option: '--'" in log
        assert before["SCP005"]["status"] == "fail"
        assert signatures["unknown_option_dashdash"]["status"] == "fail"
    elif case == "cuda":
        assert proc.returncode == 1
        assert "ValueError: given config ['--cuda', '--user'] is not supported" in log
        assert "strerr: [Score-P] ERROR: Unsupported feature 'cuda' cannot be enabled by '--cuda'" in log
        scp001 = before["SCP001"]
        assert scp001["status"] == "fail" and "without CUDA support" in scp001["message"]
        assert signatures["scorep_cuda_unsupported"]["status"] == "fail"
        assert signatures["scorep_cuda_unsupported"]["data"]["check"] == "SCP001"
    else:
        assert proc.returncode == 0 and log.endswith("499500\n")
        assert ("[Score-P] src/measurement/SCOREP_Memory.c:122: Warning: Too much memory requested. Score-P "
                "supports only up to, but not including, 4 GiB of total memory per process. Reducing to its "
                "maximum value.") in log
        assert before["SCP003"]["status"] == "fail"
        assert signatures["memory_clamp"]["status"] == "warn"
        assert signatures["memory_clamp"]["data"]["wording"] == "much"


def test_scp001_passes_against_the_real_install_and_fails_without_it(scorep: Path, tmp_path: Path) -> None:
    write(tmp_path, "hello.py", HELLO)
    write(tmp_path, "run.sh", "#!/bin/bash\npython -m scorep hello.py\n")
    found = check_only(tmp_path, scorep_env(scorep))["SCP001"]
    assert found["status"] == "pass" and found["message"].startswith(f"8.4 at {scorep}/bin/scorep-config")
    env = scorep_env(scorep)
    env["PATH"] = f"{Path(PYTHON).parent}:/usr/bin:/bin"
    proc = run_scorep(["hello.py"], env, tmp_path, tmp_path / "run.log")
    assert "FileNotFoundError: [Errno 2] No such file or directory: 'scorep-config'" in \
        (tmp_path / "run.log").read_text()
    assert proc.returncode != 0 or "Traceback" in (tmp_path / "run.log").read_text()
    after = check_only(tmp_path, env)
    assert after["SCP001"]["status"] == "fail"
    assert {f["data"].get("signature") for f in after["ART004"]["findings"]} == {"scorep_no_config"}
    # scorep-config there, but no C compiler: the wrapper compiles its init library at every start
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "scorep-config").symlink_to(scorep / "bin" / "scorep-config")
    env["PATH"] = f"{tools}:{Path(PYTHON).parent}"
    run_scorep(["hello.py"], env, tmp_path, tmp_path / "run.log")
    assert "CompileError: [Errno 2] No such file or directory: 'cc'" in (tmp_path / "run.log").read_text()
    [no_cc] = check_only(tmp_path, scorep_env(scorep))["ART004"]["findings"]
    assert no_cc["data"]["signature"] == "scorep_no_compiler" and no_cc["data"]["check"] == "SCP001"


def test_launch_refuses_cuda_on_a_score_p_without_it_before_starting(scorep: Path, tmp_path: Path) -> None:
    job_folder(tmp_path)
    res = launch(tmp_path, scorep_env(scorep), "--cuda --thread=pthread")
    assert res.returncode == 2
    assert "--scorep-flags has --cuda, but Score-P at" in res.stderr and "without CUDA support" in res.stderr
    assert not (tmp_path / "logs").exists() and not list(tmp_path.glob("scorep_rank_*"))
