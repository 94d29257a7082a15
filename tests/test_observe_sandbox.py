"""The observed reading's sandbox: a job script that tries the network, writes to $HOME, to /tmp
outside its copy and to `..`, runs `rm -rf ..`, forks a daemon with a clean environment, prints
1 GB and loops forever changes nothing outside its copy, leaves nothing running, ends within its
bound, and the job model says why it stopped. Both sandboxes (bubblewrap, unshare) where they work.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from doctor.case import Case
from doctor.jobfolder.discover import load_job
from doctor.jobfolder.processes import job_json
from doctor.observe import sandbox

HOSTILE = """#!/bin/bash
export SCOREP_TOTAL_MEMORY=3500M
srun -n 2 python -m scorep --cuda train.py
exec 3<>/dev/tcp/127.0.0.1/{port} && echo reached >&3
echo home > "$HOME/written_by_job"
echo tmp > /tmp/{token}
echo parent > ../written_by_job
rm -rf ..
rm -rf "$HOME"
env -i /bin/sleep {sleep} &
setsid /bin/sleep {sleep} &
head -c 1G /dev/zero
while :; do :; done
"""


def _kinds() -> list[str]:
    out = []
    for kind in ("bubblewrap", "unshare"):
        sandbox._kind.cache_clear()
        if sandbox._kind(kind) == kind:
            out.append(kind)
    sandbox._kind.cache_clear()
    return out or ["none"]


def _running(sleep: int) -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:2] == [b"/bin/sleep", str(sleep).encode()]:
                    out.append(pid)
        except OSError:
            continue
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", _kinds())
def test_a_hostile_job_script_changes_nothing_outside_its_copy_and_is_stopped_within_its_bound(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if kind == "none":
        pytest.skip("neither bubblewrap nor unshare works here")
    monkeypatch.setenv("GPU_DOCTOR_SANDBOX", kind)
    sandbox._kind.cache_clear()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.1)
    token = f"gpu-doctor-sandbox-{os.getpid()}-{kind}"
    sleep = 4000 + os.getpid() % 1000
    home = tmp_path / "home"
    home.mkdir()
    (home / "keep").write_text("mine\n")
    (tmp_path / "sibling").write_text("next to the job folder\n")
    job = tmp_path / "job"
    job.mkdir()
    (job / "job.sh").write_text(HOSTILE.format(port=listener.getsockname()[1], token=token, sleep=sleep))
    (job / "train.py").write_text("print('never run')\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}

    start = time.monotonic()
    model = load_job(Case(root=job, env={**os.environ, "HOME": str(home)},
                          options={"observe": True, "observe_seconds": 3.0}))
    took = time.monotonic() - start

    assert took < 10, took  # 3 s of observing, plus the static reading, on a busy machine
    with pytest.raises(TimeoutError):
        listener.accept()  # the network is off: nothing reached the test's port
    assert not Path("/tmp", token).exists()
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert _running(sleep) == []
    doc = job_json(model)
    assert doc["reading"].startswith("observed: bash ran the job scripts in a sandbox")
    notes = " ".join(doc["observed_notes"])
    assert "job.sh still running after" in notes and "stopped" in notes
    (launch,) = [c for c in model.commands if c.launch is not None]
    assert launch.read == "observed" and launch.site.line == 3
    assert launch.env["SCOREP_TOTAL_MEMORY"].value == "3500M"


def test_without_a_sandbox_the_static_reading_alone_is_used_and_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_DOCTOR_SANDBOX", "none")
    sandbox._kind.cache_clear()
    (tmp_path / "job.sh").write_text("#!/bin/bash\npython -m scorep train.py\n")
    model = load_job(Case(root=tmp_path, options={"observe": True}))
    assert model.reading == "static reading only: no sandbox here (neither bubblewrap nor unshare works)"
    assert all(c.read == "static" for c in model.commands)
    sandbox._kind.cache_clear()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root drops to nobody")
def test_as_root_the_job_script_runs_as_nobody_where_nobody_can_reach_the_folder(monkeypatch: pytest.MonkeyPatch
                                                                                 ) -> None:
    import shutil
    import tempfile

    from doctor.observe.run import observe

    if sandbox.kind() != "bubblewrap":
        pytest.skip("the drop to nobody is bubblewrap's")
    folder = Path(tempfile.mkdtemp(prefix="gpu-doctor-nobody-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        (folder / "job.sh").write_text('#!/bin/bash\nexport WHO=$(id -u)\npython -m scorep train.py\n')
        case = Case(root=folder, options={"observe": True})
        reading = observe(case, load_job(Case(root=folder)))
        assert [r.env.get("WHO") for r in reading.records if r.tool == "python"] == ["65534"]
    finally:
        shutil.rmtree(folder)
