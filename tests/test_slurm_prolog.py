"""gpu-doctor as a real Slurm Prolog (doctor/slurm/prolog.sh) on a local one-node cluster.

One cluster for the module: node `<host>` with 4 fake GPU devices, `Prolog=` the
wrapper, `PrologFlags=Alloc`, `PrologEpilogTimeout=60`. The gate inside the Prolog
loads the fake NVIDIA libraries of the scenario the conf names (tests/fakes), so a
healthy node, a node whose CUDA runtime answers 802 for good, and a gate that
cannot run are the same machine with a different conf.

The tests share the node: each leaves it healthy and resumed (fixture `node`).
The last class runs prolog.sh directly, without Slurm.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_cluster import LocalSlurm
from slurm_util import PROLOG_SH, PrologSetup, check, evidence, local_slurm, poll, write_exec

pytestmark = pytest.mark.slow

PROLOG_EPILOG_TIMEOUT = 60
GATE_TIMEOUT = 10   # the conf's TIMEOUT: the gate's own budget

JOB = "#!/bin/sh\necho \"ran on $SLURMD_NODENAME with GPUs $CUDA_VISIBLE_DEVICES\"\n"


@pytest.fixture(scope="module")
def prolog(tmp_path_factory: pytest.TempPathFactory) -> PrologSetup:
    try:
        return PrologSetup(tmp_path_factory.mktemp("prolog"), timeout=GATE_TIMEOUT).install()
    except RuntimeError as exc:   # gcc missing: no fake libraries
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory, prolog: PrologSetup) -> Iterator[LocalSlurm]:
    with local_slurm(tmp_path_factory.mktemp("slurm"), prolog=prolog.wrapper, gpus=4,
                     prolog_timeout=PROLOG_EPILOG_TIMEOUT, cpus=2) as cluster:
        yield cluster


@pytest.fixture
def node(slurm: LocalSlurm, prolog: PrologSetup) -> Iterator[LocalSlurm]:
    """The cluster, with its node healthy and in service again after the test."""
    yield slurm
    prolog.configure("healthy")
    if "DRAIN" in slurm.node_flags():
        slurm.resume()


def submit(slurm: LocalSlurm, folder: Path, *args: str) -> tuple[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    script = write_exec(folder / "job.sh", JOB)
    out = folder / "out.txt"
    return slurm.sbatch(script, f"--output={out}", f"--chdir={folder}", *args), out


@pytest.mark.slurm
def test_healthy_node_runs_the_job_and_the_verdict_names_the_allocated_gpus(
        node: LocalSlurm, prolog: PrologSetup, tmp_path: Path) -> None:
    job, out = submit(node, tmp_path, "--gres=gpu:2")

    assert node.wait_job(job, timeout=90) == "COMPLETED", node.job_info(job)
    assert out.read_text().strip() == f"ran on {node.host} with GPUs 0,1"
    doc = prolog.verdict(job)
    assert (doc["status"], doc["exit_code"]) == ("pass", 0), prolog.reason_line(job)
    assert doc["run"]["playbook"] == "prologue"
    assert doc["run"]["slurm_job_id"] == job
    assert doc["run"]["uid"] == 0                       # run by slurmd, as root
    # The gate read the job's allocation from Slurm's Prolog environment.
    assert doc["run"]["expect_gpus"] == 2
    gpu002 = evidence(check(doc, "GPU002"))
    assert gpu002["environment"] == "CUDA_VISIBLE_DEVICES=0,1"
    assert gpu002["cuDeviceGetCount"] == "2"
    assert check(doc, "GPU003")["status"] == "pass"
    [(seconds, rc)] = prolog.runs(job)
    assert rc == 0 and doc["run"]["duration_s"] < seconds < PROLOG_EPILOG_TIMEOUT / 4
    assert not (prolog.verdicts / f"node-{node.host}.txt").exists()


@pytest.mark.slurm
def test_node_whose_cuda_runtime_says_802_is_drained_until_resumed(
        node: LocalSlurm, prolog: PrologSetup, tmp_path: Path) -> None:
    prolog.configure("permanent_802")
    job, out = submit(node, tmp_path / "first", "--gres=gpu:1")

    poll(lambda: "DRAIN" in node.node_flags(), 90, "the node to drain")
    info = node.node_info()
    assert info["Reason"] == "Prolog error", info["_raw"]
    poll(lambda: node.job_field(job, "Reason") == "launch_failed_requeued_held", 30,
         "the job to be requeued and held")
    assert node.job_state(job) == "PENDING"
    assert not out.exists()                              # the job never started
    # The admin's record: which check failed, on which node, and why.
    reason = (prolog.verdicts / f"node-{node.host}.txt").read_text()
    assert reason.startswith(f"gpu-doctor: FAIL on {node.host}: GPU003 fail")
    assert "802 cudaErrorSystemNotReady" in reason
    doc = prolog.verdict(job)
    gpu003 = check(doc, "GPU003")
    assert (doc["status"], gpu003["status"]) == ("fail", "fail")
    assert gpu003["entities"] == [{"host": node.host}]
    assert "node-exclude" in [r["id"] for r in gpu003["remedies"]]
    # Even retrying 802 for its whole budget, the Prolog ends well inside PrologEpilogTimeout.
    [(seconds, rc)] = prolog.runs(job)
    assert rc == 1 and doc["run"]["duration_s"] < seconds < PROLOG_EPILOG_TIMEOUT / 2

    # The node is repaired; the admin resumes it and releases the held job.
    prolog.configure("healthy")
    node.resume()
    poll(lambda: "DRAIN" not in node.node_flags(), 30, "the node to resume")
    node.run("scontrol", "release", job)
    assert node.wait_job(job, timeout=90) == "COMPLETED", node.job_info(job)
    assert out.read_text().startswith(f"ran on {node.host}")
    assert [rc for _, rc in prolog.runs(job)] == [1, 0]  # the Prolog ran again for the released job
    assert prolog.verdict(job)["status"] == "pass"       # and the job's verdict is its last run's
    assert "GPU003" in (prolog.verdicts / f"node-{node.host}.txt").read_text()   # history stays
    again, out2 = submit(node, tmp_path / "second")
    assert node.wait_job(again, timeout=60) == "COMPLETED", node.job_info(again)
    assert out2.exists()


@pytest.mark.slurm
def test_a_gate_that_cannot_run_does_not_drain_the_node(
        node: LocalSlurm, prolog: PrologSetup, tmp_path: Path) -> None:
    prolog.configure("healthy", gpu_doctor=tmp_path / "not-installed")
    job, out = submit(node, tmp_path)

    assert node.wait_job(job, timeout=60) == "COMPLETED", node.job_info(job)
    assert out.exists()
    assert "DRAIN" not in node.node_flags()
    line = prolog.reason_line(job)
    assert "gpu-doctor prolog: the gate could not run (exit 127); node not drained" in line
    assert not (prolog.verdicts / f"job-{job}.json").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="prolog.sh trusts only a root-owned conf")
class TestWrapperAlone:
    """prolog.sh run directly, the way slurmd calls it (no PATH), without a cluster."""

    def run(self, tmp_path: Path, conf: str, mode: int = 0o644, **env: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / "prolog.conf"
        path.write_text(conf)
        path.chmod(mode)
        base = {"GPU_DOCTOR_PROLOG_CONF": str(path), "SLURM_JOB_ID": "77", "SLURMD_NODENAME": "n1",
                "VERDICT_DIR": str(tmp_path / "v")}
        return subprocess.run([str(PROLOG_SH)], env={**base, **env}, capture_output=True, text=True,
                              timeout=60)

    def test_a_gate_stuck_past_the_hard_limit_is_killed_and_the_node_drained(self, tmp_path: Path) -> None:
        stuck = write_exec(tmp_path / "stuck", "#!/bin/sh\nexec sleep 600\n")
        proc = self.run(tmp_path, f"GPU_DOCTOR={stuck}\nHARD_LIMIT=1\n")

        assert proc.returncode == 1
        reason = (tmp_path / "v" / "node-n1.txt").read_text()
        assert "gpu-doctor prolog: FAIL on n1: the gate did not finish within 1 s (exit 124" in reason
        assert reason in proc.stderr

    def test_a_conf_others_can_write_is_ignored(self, tmp_path: Path) -> None:
        marker = tmp_path / "evil-ran"
        evil = write_exec(tmp_path / "evil", f"#!/bin/sh\ntouch {marker}\n")
        good = write_exec(tmp_path / "good", "#!/bin/sh\necho gpu-doctor: PASS\n")
        proc = self.run(tmp_path, f"GPU_DOCTOR={evil}\n", mode=0o666, GPU_DOCTOR=str(good))

        assert proc.returncode == 0
        assert f"ignoring {tmp_path / 'prolog.conf'} (not root-owned or writable by others)" in proc.stderr
        assert not marker.exists()
        assert (tmp_path / "v" / "job-77.txt").read_text() == "gpu-doctor: PASS\n"

    def test_the_gate_gets_its_settings_and_no_user_path(self, tmp_path: Path) -> None:
        argv = tmp_path / "argv"
        spy = write_exec(tmp_path / "spy", f"#!/bin/sh\necho \"$PATH\" >{argv}\necho \"$@\" >>{argv}\n")
        proc = self.run(tmp_path, f"GPU_DOCTOR={spy}\nTIMEOUT=7\nFAIL_ON=warning\n"
                                  "EXTRA_ARGS='--expect-gpus 4'\n")

        assert proc.returncode == 0, proc.stderr
        path, args = argv.read_text().splitlines()
        assert path == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        assert args == (f"--check-only --playbook prologue --timeout 7 --fail-on warning --json-file "
                        f"{tmp_path / 'v' / 'job-77.json.n1'} --quiet --expect-gpus 4")
